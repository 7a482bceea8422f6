"""``prep classification`` on classification data as its releases and the usual tools write it.

- The IMDB release (``aclImdb_v1.tar.gz`` unpacked, as its README lays it out): a folder per
  split holding ``pos/`` and ``neg/`` of ``<id>_<rating>.txt`` reviews with ``<br />`` line
  breaks, the unlabelled ``unsup/`` and the ``urls_*.txt``/``*.feat`` files beside them.
- Hyperpartisan (SemEval-2019 task 4) converted to JSONL: ``hyperpartisan`` is a JSON
  boolean, or the string of the ground-truth XML's attribute (``"true"``).
- TSV written by Python's ``csv.writer(delimiter="\\t")`` and pandas' ``to_csv(sep="\\t")``:
  quoted fields with doubled quotes, line breaks and tabs, ``True``/``False``, pandas'
  unnamed index column; and plain TSV, whose quotes are text.
- The split flags every ``prep`` command shares, and the deprecated ``--split``.
"""

import csv
import json
from pathlib import Path

import pytest
from helpers import cli, ok
from releases import ARTICLES, REVIEWS, write_aclimdb, write_byarticle

from data_prep.classification import ClassificationConfig, read_labelled
from data_prep.fairseq_dataset import MANIFEST, PrepError
from data_prep.gpt2_bpe import train_bpe
from data_prep.splits import FRACTIONS_REMEDY
from longformer_fs.conventions import EOS, NUM_SPECIALS
from longformer_fs.tokenization import SubwordSpec, load_gpt2_tokenizer

FALSE, TRUE = NUM_SPECIALS, NUM_SPECIALS + 1  # label ids of classes 0 and 1

# Texts only Python's csv module and pandas quote: a quote, a line break, a tab, a quote that opens the field.
QUOTED = [
    '"Epic" is the word for it.',
    "First line.\nSecond line, after a break.",
    "A tab\there, and 'single' quotes.",
    'He said "no" and left.',
]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    train_bpe([*REVIEWS.values(), *ARTICLES, *QUOTED] * 2, d, 300)
    return d


def tokenizer(d: Path) -> list:
    return ["--encoder-json", d / "encoder.json", "--vocab-bpe", d / "vocab.bpe", "--dict", d / "dict.txt"]


def written(bpe: Path, out: Path, split: str) -> list[tuple[str, int]]:
    """``(text, label id)`` of every document of a prepared split, the text decoded."""
    from fairseq.data import data_utils

    bpe_tokenizer = load_gpt2_tokenizer(bpe / "encoder.json", bpe / "vocab.bpe")
    symbols = [int(line.split()[0]) for line in (bpe / "dict.txt").read_text().splitlines()]
    texts, labels = (
        data_utils.load_indexed_dataset(str(out / kind / split), None, "mmap") for kind in ("input0", "label")
    )
    rows = []
    for i in range(len(texts)):
        ids, (label, eos) = texts[i].tolist(), labels[i].tolist()
        assert ids[-1] == eos == EOS
        rows.append((bpe_tokenizer.decode([symbols[t - NUM_SPECIALS] for t in ids[:-1]]), label))
    return rows


def error(*args) -> str:
    """The one-line error of a run that must fail (stderr also holds progress bars)."""
    result = cli(*args)
    lines = [line for line in result.stderr.splitlines() if line.startswith("longformer-fs: error: ")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0].removeprefix("longformer-fs: error: ")


# ---------------------------------------------------------------- IMDB


def test_imdb_release_folders_are_labelled_by_folder_and_unsup_is_counted(bpe, tmp_path):
    imdb = write_aclimdb(tmp_path / "aclImdb")
    out = tmp_path / "imdb"
    args = ["prep", "classification", "--train", imdb / "train", "--test", imdb / "test", *tokenizer(bpe), "--out", out]
    stdout = ok(*args)

    # Labels by folder, sorted: pos is class 1, the positive class of fairseq's F1. Files in name
    # order; <br /> is a newline, so <br /><br /> a paragraph break.
    assert "labels (class 0..1): neg, pos" in stdout
    assert (out / "label" / "dict.txt").read_text() == "0 2\n1 3\n"
    assert written(bpe, out, "train") == [
        ("Dull from start to end.\n\n\nSkip it.", FALSE),
        ("The worst film I saw this year.", FALSE),
        ("A moving film.\n\nThe cast is superb and the score soars.", TRUE),
        ('The "twist" works, and the ending earns it.', TRUE),
        ("Good, if long.\nWorth a second look.", TRUE),
    ]
    assert written(bpe, out, "test") == [
        ("Flat and slow.", FALSE),
        ("Not for me.\nToo loud.", FALSE),
        ("A joy to watch.\n\nTen out of ten.", TRUE),
    ]

    # unsup/ and the files beside the label folders: skipped, counted by reason, shown.
    skipped = json.loads((out / "stats.json").read_text())["skipped"]
    assert skipped["count"] == 10
    assert skipped["by_reason"] == {"not in a label folder": 8, "unlabelled": 2}
    assert {"origin": str(imdb / "train" / "unsup"), "reason": "unlabelled (2 files, the IMDB release's unsup/)"} in (
        skipped["examples"]
    )
    assert "skipped 10 (8 not in a label folder, 2 unlabelled)" in stdout
    assert f"  {imdb / 'train' / 'urls_pos.txt'}: not in a label folder" in stdout

    # A folder is stamped by its files: unchanged, a rerun does nothing; an edited review rebuilds.
    assert "up to date" in ok(*args)
    (imdb / "train" / "neg" / "1_1.txt").write_text("The worst film I saw this decade.")
    assert "up to date" not in ok(*args)
    assert written(bpe, out, "train")[1] == ("The worst film I saw this decade.", FALSE)

    # A folder is an --input too, split by the fractions like a file.
    ok("prep", "classification", "--input", imdb / "train", "--valid-fraction", 0.2, "--test-fraction", 0,
       *tokenizer(bpe), "--out", tmp_path / "split")  # fmt: skip
    splits = json.loads((tmp_path / "split" / MANIFEST).read_text())["splits"]
    assert splits == {"train": {"documents": 4}, "valid": {"documents": 1}}

    # A folder without label folders says what it should hold.
    unsup = imdb / "train" / "unsup"
    message = error("prep", "classification", "--train", unsup, *tokenizer(bpe), "--out", tmp_path / "x")
    assert message == f"--train: {unsup} holds no document (a folder holds one subfolder of .txt files per label)"


# ---------------------------------------------------------------- Hyperpartisan: boolean labels


def test_hyperpartisan_booleans_are_false_true_with_true_class_1(bpe, tmp_path):
    flags = [False, True, False, True, False]
    base = ["prep", "classification", "--label-field", "hyperpartisan", *tokenizer(bpe)]
    for name, labels in (("json", flags), ("xml", [str(flag).lower() for flag in flags])):
        out = tmp_path / name
        train = write_byarticle(tmp_path / f"{name}.jsonl", labels)
        assert "labels (class 0..1): false, true" in ok(*base, "--train", train, "--out", out)
        assert written(bpe, out, "train") == [
            (t, TRUE if flag else FALSE) for t, flag in zip(ARTICLES, flags, strict=True)
        ]
        assert (out / "label" / "dict.txt").read_text() == "0 3\n1 2\n"

    # --labels names booleans as they are printed; true,false makes true class 0.
    train = tmp_path / "json.jsonl"
    ok(*base, "--train", train, "--labels", "false,true", "--out", tmp_path / "given")
    assert [label for _, label in written(bpe, tmp_path / "given", "train")] == [FALSE, TRUE, FALSE, TRUE, FALSE]
    ok(*base, "--train", train, "--labels", "True,False", "--out", tmp_path / "swapped")
    assert [label for _, label in written(bpe, tmp_path / "swapped", "train")] == [TRUE, FALSE, TRUE, FALSE, TRUE]
    message = error(*base, "--train", train, "--labels", "true,TRUE", "--out", tmp_path / "twice")
    assert message == "--labels: a label is listed twice (true,TRUE)"

    # Training data of one class still gets both: true stays class 1.
    only_true = write_byarticle(tmp_path / "true.jsonl", [True] * 5)
    ok(*base, "--train", only_true, "--out", tmp_path / "one")
    assert (tmp_path / "one" / "label" / "dict.txt").read_text() == "0 0\n1 5\n"
    assert {label for _, label in written(bpe, tmp_path / "one", "train")} == {TRUE}


# ---------------------------------------------------------------- TSV


def config(bpe: Path, **kwargs) -> ClassificationConfig:
    return ClassificationConfig(SubwordSpec.gpt2(*tokenizer(bpe)[1::2]), {}, **kwargs)


def read(path: Path, bpe: Path, **kwargs) -> list[tuple[str, str, str]]:
    records, skipped = read_labelled(path, config(bpe, **kwargs))
    assert skipped == []
    return [(r.text, r.label, r.origin.rsplit(":", 1)[1]) for r in records]


def test_tsv_of_python_csv_is_read_field_for_field(bpe, tmp_path):
    path = tmp_path / "csv.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:  # csv.writer ends rows with \r\n
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["text", "label"])
        writer.writerows((text, i % 2 == 0) for i, text in enumerate(QUOTED))
    assert '"""Epic"" is the word for it."\tTrue' in path.read_text()  # the quoting this is about
    # Each record starts on its line: the second spans two.
    assert read(path, bpe) == [
        (QUOTED[0], "true", "2"),
        (QUOTED[1], "false", "3"),
        (QUOTED[2], "true", "5"),
        (QUOTED[3], "false", "6"),
    ]

    # End to end: the line break and the quotes are in the tokens.
    out = tmp_path / "out"
    ok("prep", "classification", "--train", path, *tokenizer(bpe), "--out", out)
    assert written(bpe, out, "train") == [(text, TRUE if i % 2 == 0 else FALSE) for i, text in enumerate(QUOTED)]

    # A field longer than csv's default limit (128 KiB): one long document.
    long_text = "word " * 40_000
    with open(tmp_path / "long.tsv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter="\t").writerows([["label", "text"], ["a", long_text]])
    assert read(tmp_path / "long.tsv", bpe) == [(long_text, "a", "2")]


PANDAS_ROWS = [(text, "true" if i % 2 else "false") for i, text in enumerate(QUOTED)]


def test_tsv_in_pandas_layout_with_its_index_column(bpe, tmp_path):
    # pandas' to_csv(sep="\t") is csv.writer's quoting with \n line ends and the index first, unnamed.
    path = tmp_path / "pandas.tsv"
    with open(path, "w", newline="", encoding="utf-8-sig") as f:  # Excel's byte-order mark, too
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["", "text", "hyperpartisan"])
        writer.writerows((i, text, i % 2 == 1) for i, text in enumerate(QUOTED))
    assert [row[:2] for row in read(path, bpe, label_field="hyperpartisan")] == PANDAS_ROWS


def test_tsv_written_by_pandas(bpe, tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"text": QUOTED, "hyperpartisan": [i % 2 == 1 for i in range(len(QUOTED))]})
    frame.to_csv(tmp_path / "pandas.tsv", sep="\t")
    assert [row[:2] for row in read(tmp_path / "pandas.tsv", bpe, label_field="hyperpartisan")] == PANDAS_ROWS


def test_plain_tsv_quotes_stay_text_or_are_a_clear_error(bpe, tmp_path):
    # Quotes inside a field are text, as before, with either reading.
    path = tmp_path / "plain.tsv"
    path.write_text('text\tlabel\nHe said "hi" to me.\tpos\nA 5" screen, 3" deep\tneg\n')
    texts = [('He said "hi" to me.', "pos"), ('A 5" screen, 3" deep', "neg")]
    assert [row[:2] for row in read(path, bpe)] == texts
    assert [row[:2] for row in read(path, bpe, tsv_quoting="none")] == texts

    # A field that opens with a quote and goes on after it is no csv output: an error naming
    # the line and the way to read plain TSV, which keeps the quotes.
    with open(path, "a") as f:
        f.write('"Hi" he said.\tpos\nlast\tneg\n')
    with pytest.raises(PrepError) as caught:
        read(path, bpe)
    message = str(caught.value)
    assert message.startswith(f'{path}:4: a field opens with a quote (") and goes on after its closing quote;')
    assert message.endswith("for a TSV whose quotes are plain text, pass --tsv-quoting none")
    texts += [('"Hi" he said.', "pos"), ("last", "neg")]
    assert [row[:2] for row in read(path, bpe, tsv_quoting="none")] == texts

    # A quote that never closes: the error names the line the record starts on, not the file's end.
    path.write_text('text\tlabel\nfine\tpos\n"Unclosed\tneg\nmore\tpos\n')
    message = error("prep", "classification", "--train", path, *tokenizer(bpe), "--out", tmp_path / "out")
    assert message.startswith(f'{path}:3: a quote (") opened in this record never closes;')
    ok("prep", "classification", "--train", path, "--tsv-quoting", "none", *tokenizer(bpe), "--out", tmp_path / "out")
    assert [text for text, _ in written(bpe, tmp_path / "out", "train")] == ["fine", '"Unclosed', "more"]


# ---------------------------------------------------------------- split flags


def test_valid_and_test_fractions_and_the_deprecated_split(bpe, tmp_path):
    data = write_byarticle(tmp_path / "byarticle.jsonl", [True, False] * 2 + [True])
    base = ["prep", "classification", "--input", data, "--label-field", "hyperpartisan", *tokenizer(bpe)]
    out = tmp_path / "out"
    result = cli(*base, "--valid-fraction", 0.2, "--test-fraction", 0.2, "--out", out)
    assert result.returncode == 0 and "warning" not in result.stderr
    splits = json.loads((out / MANIFEST).read_text())["splits"]
    assert splits == {"train": {"documents": 3}, "valid": {"documents": 1}, "test": {"documents": 1}}

    # --split still works, says what to write instead, and gives the same split: the same dataset.
    result = cli(*base, "--split", "60,20,20", "--out", out)
    assert result.returncode == 0 and "up to date" in result.stdout
    warning = (
        "longformer-fs: warning: --split is deprecated; --valid-fraction 0.2 --test-fraction 0.2 give the same split"
    )
    assert warning in result.stderr.splitlines()

    # Both spellings at once is an error, even with a fraction at its default value.
    message = error(*base, "--split", "60,20,20", "--valid-fraction", 0.1, "--out", tmp_path / "both")
    assert message == "--split and --valid-fraction: give only the fractions (--split is their old spelling)"
    # Too few documents: the remedy names the flags the user gave.
    two = write_byarticle(tmp_path / "two.jsonl", [True, False])
    args = ["prep", "classification", "--input", two, "--label-field", "hyperpartisan", *tokenizer(bpe)]
    assert error(*args, "--out", tmp_path / "two").endswith(FRACTIONS_REMEDY)
    assert error(*args, "--split", "80,10,10", "--out", tmp_path / "two").endswith(
        "(e.g. --split 80,20,0), or add documents"
    )
