"""Every ``prep`` command on the inputs users bring, run in-process.

- One input split by the shared rule: each split asked for gets at least one document
  (question, article, pair) when there are enough, a corpus too small for the splits is a
  one-line error that says how many there are and what to pass, and items that belong
  together (a question's pages, an article's questions, copies of a document) share a split.
- Bad input: an empty file, a file of the wrong kind (a PDF given as JSONL, a bz2 archive
  that is not XML), text that is not UTF-8, and a run interrupted then rerun. Each is a
  one-line error, or a clean rerun, with no traceback and nothing half-written left behind.
"""

import bz2
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import cli

from data_prep import fairseq_dataset
from data_prep.fairseq_dataset import MANIFEST, SPLITS
from data_prep.gpt2_bpe import train_bpe
from longformer_fs.output import staging_path
from longformer_fs.tokenization import SubwordSpec

WORDS = "window attention band token kernel layer global local sparse dense long document model".split()
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
LATIN1 = "caf\xe9 cr\xe8me".encode("latin-1")  # byte 3 is no UTF-8


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"Document {i} is about " + " ".join(rng.choice(WORDS, 10)) + "." for i in range(n)]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    train_bpe(texts(60) + [" ".join(WORDS).upper(), "0123456789 ?!.,:'\"-"], d, 300)
    return d


def tokenizer(d: Path) -> list:
    return ["--encoder-json", d / "encoder.json", "--vocab-bpe", d / "vocab.bpe", "--dict", d / "dict.txt"]


def ok(*args) -> str:
    result = cli(*args)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout


def fails(*args) -> str:
    """The one error line of a run that must fail (stderr also holds progress bars)."""
    result = cli(*args)
    errors = [line for line in result.stderr.splitlines() if line.startswith("longformer-fs: error: ")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0].removeprefix("longformer-fs: error: ")


def split_counts(out: Path, key: str) -> dict:
    return {s: v[key] for s, v in json.loads((out / MANIFEST).read_text())["splits"].items()}


def rank(items, key) -> list:
    """``items`` in the rule's order: by SHA-1 of b"split" + the key's bytes."""
    return sorted(items, key=lambda item: hashlib.sha1(b"split" + key(item)).digest())


# ---------------------------------------------------------------- inputs of each command


def write_docs(directory: Path, n: int) -> list[str]:
    directory.mkdir(parents=True)
    docs = texts(n, seed=n)
    for i, text in enumerate(docs):
        (directory / f"doc{i:03d}.txt").write_text(text, encoding="utf-8")
    return docs


def write_labelled(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": "ab"[i % 2]}) + "\n" for i, t in enumerate(texts(n))))
    return path


def squad_article(title: str, questions: int, seed: int) -> dict:
    context = texts(1, seed)[0]
    answer = context.split()[3]
    qas = [
        {"id": f"{title}-{k}", "question": f"What is word {k}?", "answers": [{"text": answer, "answer_start": 0}]}
        for k in range(questions)
    ]
    for qa in qas:
        qa["answers"][0]["answer_start"] = context.index(answer)
    return {"title": title, "paragraphs": [{"context": context, "qas": qas}]}


def write_squad(path: Path, questions_per_article: list[int]) -> Path:
    articles = [squad_article(f"Article{a}", n, a) for a, n in enumerate(questions_per_article)]
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path


def write_triviaqa(directory: Path, pages_per_question: list[int]) -> Path:
    (directory / "wikipedia").mkdir(parents=True)
    data = []
    for q, pages in enumerate(pages_per_question):
        names = [f"Q{q}_page{p}.txt" for p in range(pages)]
        for name in names:
            (directory / "wikipedia" / name).write_text(f"The answer is band {q}. " + texts(1, q)[0])
        data.append(
            {
                "QuestionId": f"q{q}",
                "Question": f"Which band is {q}?",
                "Answer": {"Aliases": [f"band {q}"], "Value": f"band {q}"},
                "EntityPages": [{"Filename": name} for name in names],
            }
        )
    (directory / "qa.json").write_text(json.dumps({"Data": data}))
    return directory / "qa.json"


def write_wikihop(path: Path, n: int) -> Path:
    entries = [
        {
            "id": f"WH_{i}",
            "query": f"located_in document {i}",
            "answer": "band",
            "candidates": ["band", "kernel"],
            "supports": texts(2, i),
        }
        for i in range(n)
    ]
    path.write_text(json.dumps(entries))
    return path


def write_pairs(path: Path, documents: list[str]) -> Path:
    path.write_text("".join(json.dumps({"document": d, "summary": d.split(" is ")[0] + "."}) + "\n" for d in documents))
    return path


# ---------------------------------------------------------------- one input, split by the rule


@pytest.mark.parametrize("n, expected", [(10, (8, 1, 1)), (30, (28, 1, 1)), (300, (294, 3, 3))])
def test_prep_docs_gives_every_split_documents(bpe, tmp_path, n, expected):
    docs = write_docs(tmp_path / "docs", n)
    out = tmp_path / "out"
    stdout = ok("prep", "docs", "--source", f"d=txt:{tmp_path / 'docs'}", "--workers", 1, "--out", out, *tokenizer(bpe))
    counts = split_counts(out, "documents")
    assert (counts["train"], counts["valid"], counts["test"]) == expected  # the default 1% / 1%
    rows = [line.split()[:2] for line in stdout.splitlines()]
    assert all([split, f"{count:,}"] in rows for split, count in counts.items())
    # Test holds the documents of the lowest hashes of their text, valid the next ones.
    encoder = SubwordSpec.gpt2(*tokenizer(bpe)[1::2]).load()
    ranked = rank(docs, lambda d: hashlib.sha1(d.encode()).digest())
    from fairseq.data import data_utils

    for split, chosen in (("test", ranked[: expected[2]]), ("valid", ranked[expected[2] : sum(expected[1:])])):
        dataset = data_utils.load_indexed_dataset(str(out / split), None, "mmap")
        items = [dataset[i].tolist() for i in range(len(dataset))]
        written = sorted(item[:-1] for item in items if item != [2])  # paragraphs, without </s> and boundaries
        assert written == sorted(encoder.encode([d])[0].tolist() for d in chosen)


def test_prep_docs_too_small_for_its_splits_says_so(bpe, tmp_path):
    write_docs(tmp_path / "docs", 2)
    args = ["prep", "docs", "--source", f"d=txt:{tmp_path / 'docs'}", "--workers", 1, *tokenizer(bpe)]
    error = fails(*args, "--out", tmp_path / "out")
    assert error.startswith("2 documents, too few for the train, valid and test splits asked for")
    assert "pass --valid-fraction 0 and/or --test-fraction 0" in error
    assert not (tmp_path / "out").exists()
    ok(*args, "--valid-fraction", 0.3, "--test-fraction", 0, "--out", tmp_path / "two")
    assert split_counts(tmp_path / "two", "documents") == {"train": 1, "valid": 1, "test": 0}


def test_prep_classification_splits_one_input_by_the_rule(bpe, tmp_path):
    args = ["prep", "classification", "--split", "80,10,10", "--labels", "a,b", *tokenizer(bpe)]
    ok(*args, "--input", write_labelled(tmp_path / "three.jsonl", 3), "--out", tmp_path / "a")
    assert split_counts(tmp_path / "a", "documents") == {"train": 1, "valid": 1, "test": 1}
    error = fails(*args, "--input", write_labelled(tmp_path / "two.jsonl", 2), "--out", tmp_path / "b")
    assert error.startswith("2 distinct documents, too few for the train, valid and test splits")
    assert error.endswith("give a split weight 0 in --split to leave it out (e.g. --split 80,20,0), or add documents")


def test_prep_qa_splits_squad_by_article(bpe, tmp_path):
    path = write_squad(tmp_path / "squad.json", [3, 1, 1, 2])  # articles of 3, 1, 1 and 2 questions
    out = tmp_path / "out"
    ok(
        "prep",
        "qa",
        "--format",
        "squad",
        "--input",
        path,
        "--valid-fraction",
        0.2,
        "--test-fraction",
        0.2,
        "--out",
        out,
        *tokenizer(bpe),
    )
    # 4 articles: test round(0.8) = 1, valid 1, train 2; the articles ranked by the hash of their titles.
    articles = rank(range(4), lambda a: f"Article{a}".encode())
    expected = {"test": {articles[0]}, "valid": {articles[1]}, "train": set(articles[2:])}
    for split in SPLITS:
        ids = [json.loads(line)["id"] for line in (out / f"{split}.examples.jsonl").read_text().splitlines()]
        assert {int(i.split("-")[0].removeprefix("Article")) for i in ids} == expected[split]
        assert len(ids) == sum([3, 1, 1, 2][a] for a in expected[split])  # every question of its articles


def test_prep_qa_keeps_a_triviaqa_questions_pages_together(bpe, tmp_path):
    def run(directory: Path, pages: list[int]):
        path = write_triviaqa(directory, pages)
        args = ["prep", "qa", "--format", "triviaqa", "--evidence", directory, "--input", path]
        return cli(*args, "--out", directory / "out", *tokenizer(bpe))

    assert run(tmp_path / "a", [2, 1, 3]).returncode == 0
    questions = rank(range(3), lambda q: f"q{q}".encode())
    for split, q in zip(("test", "valid", "train"), questions, strict=True):
        lines = (tmp_path / "a" / "out" / f"{split}.examples.jsonl").read_text().splitlines()
        assert [json.loads(line)["id"] for line in lines] == [f"q{q}--Q{q}_page{p}.txt" for p in range([2, 1, 3][q])]
    small = run(tmp_path / "b", [2, 2])
    assert small.returncode == 2 and "error: 2 questions, too few for the train, valid and test splits" in small.stderr


def test_prep_wikihop_splits_one_input_by_the_rule(bpe, tmp_path):
    args = ["prep", "wikihop", "--max-tokens", 512, *tokenizer(bpe)]
    ok(*args, "--input", write_wikihop(tmp_path / "three.json", 3), "--out", tmp_path / "a")
    assert split_counts(tmp_path / "a", "examples") == {"train": 1, "valid": 1, "test": 1}
    error = fails(*args, "--input", write_wikihop(tmp_path / "two.json", 2), "--out", tmp_path / "b")
    assert error.startswith("2 examples, too few for the train, valid and test splits")


def test_prep_summarization_keeps_copies_of_a_document_together(bpe, tmp_path):
    documents = texts(3, seed=5)
    path = write_pairs(tmp_path / "pairs.jsonl", documents + [documents[1]])  # a second summary of one document
    out = tmp_path / "out"
    args = ["prep", "summarization", "--format", "jsonl", "--source-field", "document", "--target-field", "summary"]
    args += ["--workers", 1, *tokenizer(bpe)]
    ok(*args, "--input", path, "--out", out)
    counts = split_counts(out, "pairs")
    with_copy = {0: "test", 1: "valid", 2: "train"}[rank(documents, str.encode).index(documents[1])]
    assert counts == {s: 1 + (s == with_copy) for s in SPLITS}
    error = fails(*args, "--input", write_pairs(tmp_path / "two.jsonl", documents[:2]), "--out", tmp_path / "b")
    assert error.startswith("2 documents, too few for the train, valid and test splits")


# ---------------------------------------------------------------- bad inputs


def bad_file(directory: Path, kind: str, name: str) -> Path:
    """An input ``name`` that is empty, a PDF, a bz2 archive of plain text, or Latin-1 text."""
    data = {"empty": b"", "pdf": PDF, "bz2": bz2.compress(b"plain text, not what was asked for"), "latin1": LATIN1}
    path = directory / name
    path.write_bytes(data[kind])
    return path


def docs_args(tmp: Path, kind: str) -> tuple[list, Path]:
    if kind == "latin1":
        (tmp / "texts").mkdir()
        return ["--source", f"t=txt:{tmp / 'texts'}", "--workers", 1], bad_file(tmp / "texts", kind, "a.txt")
    source_kind, name = ("wiki", "dump.xml.bz2") if kind == "bz2" else ("jsonl", "docs.jsonl")
    path = bad_file(tmp, kind, name)
    return ["--source", f"d={source_kind}:{path}", "--workers", 1], path


def with_file(*before: str, option: str, name) -> callable:
    """Arguments ``before`` then ``option`` and a bad file named ``name`` (or ``name(kind)``)."""

    def arguments(tmp: Path, kind: str) -> tuple[list, Path]:
        path = bad_file(tmp, kind, name(kind) if callable(name) else name)
        return [*before, option, path], path

    return arguments


SUMMARIZATION = ["--format", "jsonl", "--source-field", "document", "--target-field", "summary", "--workers", 1]
# command -> (arguments and the path of a bad input, the error per kind).
BAD = {
    "docs": (
        docs_args,
        {
            "empty": "no document to write (0 read)",
            "pdf": "no document to write (0 read; 1 skipped, the first: {path}: a PDF file, not JSONL)",
            "bz2": "no document to write (0 read; 1 skipped, the first: {path}: not a MediaWiki XML dump "
            "(not XML: syntax error: line 1, column 0))",
            "latin1": "no document to write (0 read; 1 skipped, the first: {path}: not UTF-8 text (byte 3))",
        },
    ),
    "classification": (
        with_file(option="--train", name=lambda kind: "train.tsv" if kind == "bz2" else "train.jsonl"),
        {
            "empty": "--train: {path} holds no document",
            "pdf": "{path}: a PDF file, not JSONL",
            "bz2": "{path}: a bzip2-compressed file, not TSV",
            "latin1": "{path}:1: not UTF-8 text (byte 3 of the line)",
        },
    ),
    "qa": (
        with_file("--format", "squad", option="--train", name="train.json"),
        {
            "empty": "{path}: empty; expected a JSON document",
            "pdf": "{path}: a PDF file, not JSON",
            "bz2": "{path}: a bzip2-compressed file, not JSON",
            "latin1": "{path}: not UTF-8 text (byte 3); JSON files are UTF-8",
        },
    ),
    "wikihop": (
        with_file(option="--train", name="train.json"),
        {
            "empty": "{path}: empty; expected a JSON document",
            "pdf": "{path}: a PDF file, not JSON",
            "bz2": "{path}: a bzip2-compressed file, not JSON",
            "latin1": "{path}: not UTF-8 text (byte 3); JSON files are UTF-8",
        },
    ),
    "summarization": (
        with_file(*SUMMARIZATION, option="--train", name="train.jsonl"),
        {
            "empty": "{path}: no JSON object in it, empty",
            "pdf": "{path}: a PDF file, not JSONL",
            "bz2": "{path}: a bzip2-compressed file, not JSONL",
            "latin1": "{path}: no JSON object in it ({path}:1: not UTF-8 text)",
        },
    ),
    # Character corpora are bytes: any file is text to them. A text file given as the zip stands
    # in for the non-UTF-8 case.
    "text8": (
        with_file("--skip-checksum", option="--zip", name="text8.zip"),
        {
            "empty": "--zip: {path} is empty; re-download it",
            "pdf": "--zip: {path} is a PDF file, not a zip archive",
            "bz2": "--zip: {path} is a bzip2-compressed file, not a zip archive",
            "latin1": "--zip: {path} is not a readable zip file (File is not a zip file); re-download it",
        },
    ),
}


@pytest.mark.parametrize("kind", ["empty", "pdf", "bz2", "latin1"])
@pytest.mark.parametrize("command", list(BAD))
def test_bad_input_is_a_one_line_error_and_leaves_nothing(bpe, tmp_path, command, kind):
    arguments, errors = BAD[command]
    args, path = arguments(tmp_path, kind)
    out = tmp_path / "out"
    tokens = [] if command == "text8" else tokenizer(bpe)
    assert fails("prep", command, *args, *tokens, "--out", out) == errors[kind].format(path=path)
    assert not out.exists()


def test_an_input_without_items_is_an_error_naming_it(bpe, tmp_path):
    (tmp_path / "squad.json").write_text(json.dumps({"data": []}))
    (tmp_path / "wikihop.json").write_text("[]")
    error = fails(
        "prep", "qa", "--format", "squad", "--valid", tmp_path / "squad.json", "--out", tmp_path / "a", *tokenizer(bpe)
    )
    assert error == f"--valid: {tmp_path / 'squad.json'} holds no example"
    error = fails("prep", "wikihop", "--input", tmp_path / "wikihop.json", "--out", tmp_path / "b", *tokenizer(bpe))
    assert error == f"--input: {tmp_path / 'wikihop.json'} holds no example"
    # TriviaQA pages that never hold the answer leave train with nothing to learn from.
    path = write_triviaqa(tmp_path / "trivia", [1])
    (tmp_path / "trivia" / "wikipedia" / "Q0_page0.txt").write_text("Nothing to see here.")
    args = ["prep", "qa", "--format", "triviaqa", "--evidence", tmp_path / "trivia", "--train", path]
    error = fails(*args, "--out", tmp_path / "c", *tokenizer(bpe))
    assert error.endswith(
        "no train example has its answer inside a window (1 not in the text, 0 cut away by "
        "--max-tokens or the window edges); nothing to train on"
    )


def good_inputs(tmp: Path, command: str) -> list:
    """Arguments of a small run that succeeds."""
    if command == "docs":
        write_docs(tmp / "docs", 5)
        return ["--source", f"d=txt:{tmp / 'docs'}", "--workers", 1]
    if command == "classification":
        return ["--input", write_labelled(tmp / "labelled.jsonl", 6)]
    if command == "qa":
        return ["--format", "squad", "--train", write_squad(tmp / "squad.json", [1, 2])]
    if command == "wikihop":
        return ["--train", write_wikihop(tmp / "wikihop.json", 2), "--max-tokens", 512]
    if command == "summarization":
        return SUMMARIZATION + ["--input", write_pairs(tmp / "pairs.jsonl", texts(5))]
    with zipfile.ZipFile(tmp / "text8.zip", "w") as archive:
        archive.writestr("text8", b"abc def " * 100)
    return ["--zip", tmp / "text8.zip", "--skip-checksum", "--split-sizes", "600,100,100"]


@pytest.mark.parametrize("command", list(BAD))
def test_an_interrupted_run_leaves_nothing_and_a_rerun_finishes(bpe, tmp_path, monkeypatch, command):
    args = ["prep", command, *good_inputs(tmp_path, command), "--out", tmp_path / "out"]
    args += [] if command == "text8" else tokenizer(bpe)

    def interrupted(self, ids):
        raise KeyboardInterrupt  # Ctrl-C while the first item is written

    with monkeypatch.context() as patch:
        patch.setattr(fairseq_dataset.MmapWriter, "add", interrupted)
        interrupted_run = cli(*args)
    assert interrupted_run.returncode == 130 and interrupted_run.stderr.endswith("\nlongformer-fs: interrupted\n")
    assert not (tmp_path / "out").exists()
    ok(*args)
    assert (tmp_path / "out" / MANIFEST).is_file() and not staging_path(tmp_path / "out").exists()
    assert "nothing to do" in ok(*args)
