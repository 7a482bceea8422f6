"""``longformer-fs prep coref`` on generated CoNLL-2012 text: nested and multi-word
mentions, several document parts, speakers, folders; malformed brackets named by file
and line."""

import json

import numpy as np
import pytest
from helpers import fails, ok

from data_prep.coref import read_conll
from data_prep.gpt2_bpe import train_bpe
from longformer_fs.conventions import BOS, EOS


def conll_line(doc, part, index, word, speaker, coref):
    # doc part index word POS parse lemma frameset sense speaker NE coref
    return f"{doc}\t{part}\t{index}\t{word}\tNN\t*\t-\t-\t-\t{speaker}\t*\t{coref}"


def conll_document(name, part, sentences):
    """``sentences``: lists of ``(word, speaker, coref)``."""
    lines = [f"#begin document ({name}); part {part:03d}"]
    for sentence in sentences:
        lines += [conll_line(name, part, i, *word) for i, word in enumerate(sentence)]
        lines.append("")
    return "\n".join(lines + ["#end document"]) + "\n"


# Document part 0: "John Smith said he saw the tall man 's dog ." and "His dog barked ."
# Clusters: 1 = John Smith / he / His; 2 = the tall man 's dog (outer) / His dog; 3 = the tall man (nested).
PART0 = [
    [("John", "A", "(1"), ("Smith", "A", "1)"), ("said", "A", "-"), ("he", "A", "(1)"), ("saw", "A", "-"),
     ("the", "A", "(2|(3"), ("tall", "A", "-"), ("man", "A", "3)"), ("'s", "A", "-"), ("dog", "A", "2)"),
     (".", "A", "-")],
    [("His", "B", "(2|(1)"), ("dog", "B", "2)"), ("barked", "B", "-"), (".", "B", "-")],
]  # fmt: skip
PART0_CLUSTERS = [[[0, 1], [3, 3], [11, 11]], [[5, 9], [11, 12]], [[5, 7]]]
PART1 = [[("Mary", "C", "(7)"), ("laughed", "C", "-"), ("and", "C", "-"), ("she", "C", "(7)"), ("left", "C", "-")]]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coref")
    text = conll_document("bc/doc_a", 0, PART0) + conll_document("bc/doc_a", 1, PART1)
    (tmp / "train" / "bc").mkdir(parents=True)
    (tmp / "train" / "bc" / "doc_a_gold_conll").write_text(text)
    (tmp / "train" / "bc" / "ignored.txt").write_text("not conll")
    (tmp / "valid_gold_conll").write_text(conll_document("nw/doc_b", 0, PART1))
    words = [w for sentence in PART0 + PART1 for w, _, _ in sentence]
    (tmp / "bpe").mkdir()
    train_bpe([" ".join(words)] * 20, tmp / "bpe", 300)
    bpe = ["--encoder-json", tmp / "bpe" / "encoder.json", "--vocab-bpe", tmp / "bpe" / "vocab.bpe"]
    return tmp, bpe + ["--dict", tmp / "bpe" / "dict.txt"]


def test_reader_nested_multiword_clusters_speakers_and_parts(inputs):
    tmp, _ = inputs
    docs = read_conll(tmp / "train" / "bc" / "doc_a_gold_conll")
    assert [(d.name, d.part) for d in docs] == [("bc/doc_a", 0), ("bc/doc_a", 1)]
    assert [[list(s) for s in c] for c in docs[0].clusters] == PART0_CLUSTERS
    assert docs[0].sentences == [0] * 11 + [1] * 4
    assert docs[0].speakers[10:12] == ["A", "B"]
    assert docs[1].clusters == [[(0, 0), (3, 3)]] and docs[1].words[0] == "Mary"


def test_prep_writes_token_spans_maps_and_manifest(inputs, tmp_path):
    tmp, bpe = inputs
    out = tmp_path / "data"
    log = ok("prep", "coref", "--train", tmp / "train", "--valid", tmp / "valid_gold_conll", *bpe,
             "--max-tokens", "12", "--out", out)  # fmt: skip
    manifest = json.loads((out / "prep.json").read_text())
    assert manifest["kind"] == "coref" and manifest["splits"]["train"]["documents"] == 2
    stats = json.loads((out / "stats.json").read_text())["splits"]["train"]
    assert stats["documents"] == 2 and stats["mentions"] == 6 + 2 and stats["clusters"] == 4
    # Segments of 12 positions hold 10 tokens: part 0 (15 words) needs two or more, part 1 (5 words) one.
    assert stats["multi_segment"] == 1 and "> 1 segment of 12" in log
    examples = [json.loads(line) for line in (out / "train.examples.jsonl").read_text().splitlines()]
    assert examples[0]["id"] == "bc/doc_a" and examples[0]["clusters"] == PART0_CLUSTERS
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(out / "dict.txt"))
    tokens = data_utils.load_indexed_dataset(str(out / "train.tokens"), None, "mmap")
    mentions = data_utils.load_indexed_dataset(str(out / "train.mentions"), None, "mmap")
    sentence = data_utils.load_indexed_dataset(str(out / "train.sentence"), None, "mmap")
    speaker = data_utils.load_indexed_dataset(str(out / "train.speaker"), None, "mmap")
    from longformer_fs.tokenization import SubwordSpec

    encoder = SubwordSpec.gpt2(*[tmp / "bpe" / n for n in ("encoder.json", "vocab.bpe", "dict.txt")]).load()
    for index, example in enumerate(examples):
        ids = tokens[index].numpy()
        smap = np.asarray(example["subtoken_map"])
        assert len(smap) == len(ids) and BOS not in ids and EOS not in ids
        # Each word's tokens decode to the word; the token spans cover exactly the word spans.
        for w, word in enumerate(example["words"]):
            assert encoder.decode(ids[smap == w]).strip() == word
        triples = mentions[index].view(-1, 3).tolist()
        expected = sorted(
            (int(np.flatnonzero(smap == s)[0]), int(np.flatnonzero(smap == e)[-1]), c)
            for c, spans in enumerate(example["clusters"], 1) for s, e in spans
        )  # fmt: skip
        assert sorted(map(tuple, triples)) == expected
        words_sentences = {0: [0] * 11 + [1] * 4, 1: [0] * 5}[index]
        assert sentence[index].tolist() == [words_sentences[w] for w in smap]
    assert speaker[0].tolist() == [0 if w < 11 else 1 for w in np.asarray(examples[0]["subtoken_map"])]
    assert len(dictionary) > 4
    # A rerun with the same inputs does nothing.
    assert "up to date" in ok("prep", "coref", "--train", tmp / "train", "--valid", tmp / "valid_gold_conll", *bpe,
                              "--max-tokens", "12", "--out", out)  # fmt: skip


@pytest.mark.parametrize(
    "coref, line, message",
    [
        ("(5", 2, "cluster 5 opened here is never closed"),
        ("5)", 2, "closes a mention of cluster 5 that was never opened"),
        ("(x)", 2, "bad coreference piece '(x)'"),
        ("5", 2, "bad coreference piece '5'"),
    ],
)
def test_malformed_brackets_name_file_and_line(inputs, tmp_path, coref, line, message):
    _, bpe = inputs
    path = tmp_path / "bad_gold_conll"
    path.write_text(conll_document("d", 0, [[("a", "A", coref), ("b", "A", "-")]]))
    err = fails("prep", "coref", "--train", path, *bpe, "--out", tmp_path / "out")
    assert f"{path}:{line}: " in err and message in err, err
    assert not (tmp_path / "out").exists()


def test_missing_end_and_short_lines_are_errors(inputs, tmp_path):
    _, bpe = inputs
    path = tmp_path / "x_gold_conll"
    path.write_text("#begin document (d); part 000\n" + conll_line("d", 0, 0, "a", "A", "-") + "\n")
    assert "has no #end document" in fails("prep", "coref", "--train", path, *bpe, "--out", tmp_path / "o")
    path.write_text("#begin document (d); part 000\nd 0 0 a\n#end document\n")
    assert f"{path}:2: 4 columns" in fails("prep", "coref", "--train", path, *bpe, "--out", tmp_path / "o")
    path.write_text("#begin document (d); part 000\n#end document\n")
    assert f"{path}:2: document 'd#000' has no words" in fails(
        "prep", "coref", "--train", path, *bpe, "--out", tmp_path / "o"
    )
    (tmp_path / "empty").mkdir()
    err = fails("prep", "coref", "--train", tmp_path / "empty", *bpe, "--out", tmp_path / "o")
    assert "holds no *_gold_conll file" in err
