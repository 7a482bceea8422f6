"""``longformer-fs prep coref`` on the CoNLL-2012 release as it is laid out: three languages
under each split, skeleton files beside the restored ones, escaped sentence-final words.

The tree and files follow the task's data page (conll.cemantix.org/2012/data.html): each
split ``conll-2012/v4/data/{train,development,test}`` holds ``data/{english,chinese,arabic}/
annotations/<genre>/<source>/<nn>/<document>.v4_gold_skel``, the annotations with the
word column ``[WORD]``; the release's ``skeleton2conll.sh`` writes the OntoNotes words
into ``<document>.v4_gold_conll`` beside each. Columns are space-aligned; the
coreference column comes last.
"""

import json

import pytest
from helpers import fails, ok
from releases import CONLL_WORDS, WSJ, part_text, write_conll_release

from data_prep.gpt2_bpe import train_bpe


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = write_conll_release(tmp_path_factory.mktemp("release"))
    bpe_dir = root.parent / "bpe"
    bpe_dir.mkdir()
    train_bpe([CONLL_WORDS] * 20, bpe_dir, 300)
    bpe = ["--encoder-json", bpe_dir / "encoder.json", "--vocab-bpe", bpe_dir / "vocab.bpe"]
    return root, bpe + ["--dict", bpe_dir / "dict.txt"]


def examples(out, split):
    return [json.loads(line) for line in (out / f"{split}.examples.jsonl").read_text().splitlines()]


def test_the_release_prepares_english_and_counts_the_languages_left_out(release, tmp_path):
    root, bpe = release
    out = tmp_path / "coref"
    log = ok("prep", "coref", "--train", root / "train", "--valid", root / "development", *bpe, "--out", out)
    assert [e["id"] for e in examples(out, "train")] == ["bc/cnn/00/cnn_0004", "nw/wsj/00/wsj_0001"]
    assert [e["id"] for e in examples(out, "valid")] == ["nw/wsj/00/wsj_0002"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["language"] == "english"
    left_out = stats["splits"]["train"]["left_out"]
    assert (left_out["count"], left_out["by_reason"]) == (2, {"chinese": 1, "arabic": 1})
    assert [e["reason"] for e in left_out["examples"]] == ["chinese", "arabic"]
    assert left_out["examples"][0]["origin"].endswith("data/chinese/annotations/bc/cctv/00/cctv_0001.v4_gold_conll")
    assert stats["splits"]["valid"]["left_out"]["by_reason"] == {"chinese": 1}
    assert "train: files left out by --language english: 2 (1 chinese, 1 arabic)" in log
    assert "valid: files left out by --language english: 1 (1 chinese)" in log

    # Another language is another dataset: the same output rebuilt, not "up to date".
    log = ok("prep", "coref", "--train", root / "train", *bpe, "--language", "arabic", "--out", out)
    assert "up to date" not in log
    assert [e["id"] for e in examples(out, "train")] == ["nw/ann/00/ann_0001"]
    left_out = json.loads((out / "stats.json").read_text())["splits"]["train"]["left_out"]
    assert left_out["by_reason"] == {"english": 2, "chinese": 1}
    ok("prep", "coref", "--train", root / "development", *bpe, "--language", "all", "--out", out)
    assert [e["id"] for e in examples(out, "train")] == ["bc/cctv/00/cctv_0003", "nw/wsj/00/wsj_0002"]


def test_escaped_sentence_final_words_read_as_the_reference_preprocessing_reads_them(release, tmp_path):
    root, bpe = release
    out = tmp_path / "coref"
    log = ok("prep", "coref", "--train", root / "train", *bpe, "--out", out)
    cnn = examples(out, "train")[0]
    assert cnn["words"] == ["He", "said", "so", ".", "Did", "he", "go", "?", "Yes", "."]
    assert cnn["clusters"] == [[[0, 0], [5, 5]]]
    assert json.loads((out / "stats.json").read_text())["splits"]["train"]["unescaped"] == {"/.": 2, "/?": 1}
    assert "train: words unescaped: 2 '/.' -> '.', 1 '/?' -> '?'" in log
    # The tokens are those of "." and "?": each word's tokens decode to it.
    from fairseq.data import data_utils

    from longformer_fs.tokenization import SubwordSpec

    bpe_dir = bpe[1].parent
    encoder = SubwordSpec.gpt2(bpe_dir / "encoder.json", bpe_dir / "vocab.bpe", bpe_dir / "dict.txt").load()
    tokens = data_utils.load_indexed_dataset(str(out / "train.tokens"), None, "mmap")[0].numpy()
    words = [encoder.decode(tokens[[i for i, w in enumerate(cnn["subtoken_map"]) if w == n]]).strip() for n in (3, 7)]
    assert words == [".", "?"]


def test_a_folder_of_ones_own_files_is_kept_whatever_the_language(release, tmp_path):
    _, bpe = release
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a_gold_conll").write_text(part_text("mine/a", WSJ))
    ok("prep", "coref", "--train", tmp_path / "mine", *bpe, "--language", "arabic", "--out", tmp_path / "out")
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())["splits"]["train"]
    assert stats["documents"] == 1 and stats["left_out"]["count"] == 0


def test_another_languages_file_or_folder_says_which_language_to_pass(release, tmp_path):
    root, bpe = release
    cctv = root / "train" / "data" / "chinese" / "annotations" / "bc" / "cctv" / "00" / "cctv_0001.v4_gold_conll"
    err = fails("prep", "coref", "--train", cctv, *bpe, "--out", tmp_path / "out")
    assert f"--train: {cctv} is chinese (under data/chinese/), not english; pass --language chinese" in err
    err = fails("prep", "coref", "--train", root / "train" / "data" / "arabic", *bpe, "--out", tmp_path / "out")
    assert "holds no english *_gold_conll file (left out: 1 arabic); pass --language arabic or --language all" in err
    assert "invalid choice: 'french'" in fails(
        "prep", "coref", "--train", root, *bpe, "--language", "french", "--out", tmp_path / "o"
    )
    assert not (tmp_path / "out").exists()


def test_skeletons_are_refused_until_their_words_are_restored(release, tmp_path):
    root, bpe = release
    skel = root / "train" / "data" / "english" / "annotations" / "bc" / "cnn" / "00" / "cnn_0004.v4_gold_skel"
    err = fails("prep", "coref", "--train", skel, *bpe, "--out", tmp_path / "out")
    assert f"--train: {skel} is a CoNLL-2012 skeleton, its words still [WORD]; restore the words with" in err
    assert "skeleton2conll.sh" in err
    # The Chinese skeleton without its *_gold_conll stops a Chinese run (an English one read past it above).
    err = fails("prep", "coref", "--train", root / "train", *bpe, "--language", "chinese", "--out", tmp_path / "out")
    lost = root / "train" / "data" / "chinese" / "annotations" / "bc" / "cctv" / "00" / "cctv_0002.v4_gold_skel"
    assert f"1 *_gold_skel file(s) under {root / 'train'} have no *_gold_conll beside them (the first: {lost})" in err
    # A skeleton copied to a *_gold_conll name: its every word is the placeholder.
    copied = tmp_path / "cnn_0004.v4_gold_conll"
    copied.write_text(skel.read_text())
    err = fails("prep", "coref", "--train", copied, *bpe, "--out", tmp_path / "out")
    assert f"{copied}:1: document 'bc/cnn/00/cnn_0004#000' is a skeleton, every word [WORD]" in err
    assert not (tmp_path / "out").exists()
