"""``longformer-fs prep summarization`` on inputs built here: a papers.jsonl from ``prep docs``
run on PDFs (fpdf2), arXiv/PubMed-style files and plain JSONL, with a BPE trained here; the
output is read back through fairseq's translation task."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from data_prep.doc_corpus import DocPrepConfig, prepare_docs
from data_prep.doc_sources import SourceSpec
from data_prep.gpt2_bpe import train_bpe
from data_prep.summarization import SummarizationConfig, prepare_summarization
from longformer_fs.cli import main as cli
from longformer_fs.conventions import BOS, EOS, NUM_SPECIALS
from longformer_fs.tokenization import SubwordSpec

WORDS = "window attention band token kernel layer global local sparse dense long document model summary".split()


def sentences(rng, n: int, words: int = 8) -> list[str]:
    return [" ".join(rng.choice(WORDS, words)).capitalize() + "." for _ in range(n)]


class Bpe:
    """A small GPT-2-style BPE and dict.txt trained here, with the encoder under test."""

    def __init__(self, directory: Path, texts: list[str]):
        self.tokenizer = train_bpe(texts, directory, 300)
        self.spec = SubwordSpec.gpt2(directory / "encoder.json", directory / "vocab.bpe", directory / "dict.txt")
        self.encoder = self.spec.load()
        self.gpt2_ids = [int(line.split()[0]) for line in (directory / "dict.txt").read_text().splitlines()]

    def args(self) -> list:
        return ["--encoder-json", self.spec.files[0], "--vocab-bpe", self.spec.files[1], "--dict", self.spec.dict_txt]

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode([text])[0].tolist()

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode([self.gpt2_ids[i - NUM_SPECIALS] for i in ids])


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    rng = np.random.default_rng(0)
    return Bpe(tmp_path_factory.mktemp("bpe"), [" ".join(sentences(rng, 6)) for _ in range(50)])


def load_split(out: Path, split: str):
    """The split through fairseq's translation task: (source, target) id lists, and the references."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask.setup_task(
        TranslationConfig(data=str(out), source_lang="source", target_lang="target", dataset_impl="mmap")
    )
    task.load_dataset(split)
    dataset = task.dataset(split)
    pairs = [(dataset[i]["source"].tolist(), dataset[i]["target"].tolist()) for i in range(len(dataset))]
    references = [json.loads(line) for line in (out / f"{split}.references.jsonl").read_text().splitlines()]
    assert len(references) == len(pairs)
    return pairs, references


def run(capsys, *args):
    code = cli(["prep", "summarization", *map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# ---------------------------------------------------------------- papers from prep docs


def make_pdf(path: Path, lines: list[str]) -> None:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("helvetica", size=10)
    pdf.add_page()
    for i, line in enumerate(lines):
        pdf.text(20, 20 + 6 * i, line)
    pdf.output(str(path))


def test_papers_from_prep_docs_become_body_to_abstract_pairs(bpe, tmp_path, capsys):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    make_pdf(
        pdfs / "a.pdf",
        ["Window Models", "Abstract", "Windows are local. Bands are", "sparse.", "1 Introduction", "Long documents."],
    )
    make_pdf(pdfs / "b.pdf", ["Band Kernels", "Abstract: Kernels are dense.", "1 Introduction", "Tokens attend."])
    make_pdf(pdfs / "c.pdf", ["Notes", "No abstract here.", "Just text."])
    docs = tmp_path / "docs"
    prepare_docs(DocPrepConfig((SourceSpec("papers", "pdf", pdfs),), bpe.spec), docs, log=lambda *_: None)
    papers = [json.loads(line) for line in (docs / "papers.jsonl").read_text().splitlines()]
    out = tmp_path / "sum"
    args = ["--format", "papers", "--train", docs / "papers.jsonl", "--out", out, "--workers", "1"]
    code, stdout, _ = run(capsys, *args, *bpe.args())
    assert code == 0

    pairs, references = load_split(out, "train")
    with_abstract = [p for p in papers if p["abstract"]]
    assert len(pairs) == len(with_abstract) == 2
    for (source, target), reference, paper in zip(pairs, references, with_abstract, strict=True):
        assert source[0] == BOS and source[-1] == EOS and target[-1] == EOS and BOS not in target
        assert bpe.decode(source[1:-1]) == paper["body"]
        assert bpe.decode(target[:-1]) == paper["abstract"]
        assert reference["id"] == paper["file"]
    assert references[0]["reference"] == "Windows are local.\nBands are sparse."
    assert references[1]["reference"] == "Kernels are dense."

    stats = json.loads((out / "stats.json").read_text())
    number = next(i for i, p in enumerate(papers, 1) if p["abstract"] is None)
    assert stats["empty_side"]["count"] == 1
    without = papers[number - 1]
    named = f"{without['file']} ({docs / 'papers.jsonl'}:{number})"
    assert stats["empty_side"]["examples"][0]["origin"] == named
    assert f"{named}: empty target ('abstract'): {without['abstract_missing']}" in stdout
    assert (
        (out / "dict.source.txt").read_text() == (out / "dict.target.txt").read_text() == bpe.spec.dict_txt.read_text()
    )


# ---------------------------------------------------------------- JSONL, split by a hash


@pytest.fixture(scope="module")
def pairs_jsonl(tmp_path_factory):
    """40 good pairs of varied length and five bad lines; returns (path, good examples), each
    example a dict with its record, its FILE:LINE and its summary's sentences."""
    rng = np.random.default_rng(1)
    examples = []
    for i in range(40):
        summary = sentences(rng, 1 + i % 3, words=4 + i % 5)
        record = {"id": f"doc{i}", "document": " ".join(sentences(rng, 1 + i % 6))}
        record["summary"] = summary if i % 2 else " ".join(summary)  # a list of sentences, or one string
        examples.append({"record": record, "sentences": summary})
    del examples[7]["record"]["id"]  # falls back to FILE:LINE
    lines = [json.dumps(e["record"]) for e in examples]
    lines[3:3] = [
        "{not json",
        json.dumps({"id": "x", "document": "Only a document."}),
        json.dumps({"id": "y", "document": "A document.", "summary": "  "}),
        json.dumps({"id": "z", "document": 5, "summary": "Five."}),
        json.dumps(["a", "list"]),
    ]
    path = tmp_path_factory.mktemp("jsonl") / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for example in examples:
        example["origin"] = f"{path}:{lines.index(json.dumps(example['record'])) + 1}"
    return path, examples


def test_jsonl_split_by_hash_truncated_and_reported(bpe, pairs_jsonl, tmp_path):
    path, examples = pairs_jsonl
    cfg = SummarizationConfig(
        "jsonl",
        bpe.spec,
        input=path,
        valid_fraction=0.25,
        test_fraction=0.25,
        source_field="document",
        target_field="summary",
        max_source_tokens=24,
        max_target_tokens=12,
    )
    result = prepare_summarization(cfg, tmp_path / "out", log=lambda *_: None)

    # The split rule: the 40 pairs ranked by SHA-1 of b"split" + the document; test takes the
    # first quarter, valid the next, train the rest; each split keeps the input's order.
    rank = sorted(examples, key=lambda e: hashlib.sha1(b"split" + e["record"]["document"].encode()).digest())
    expected = {"train": [], "valid": [], "test": []}
    for example in examples:
        position = rank.index(example)
        expected["test" if position < 10 else "valid" if position < 20 else "train"].append(example)
    for split, examples_in_split in expected.items():
        pairs, references = load_split(tmp_path / "out", split)
        assert len(pairs) == len(examples_in_split)
        cut = {"source": [], "target": []}
        for (source, target), reference, example in zip(pairs, references, examples_in_split, strict=True):
            full_source = bpe.encode(example["record"]["document"])
            full_target = bpe.encode(" ".join(example["sentences"]))
            assert source == [BOS] + full_source[:22] + [EOS] and len(source) <= 24
            assert target == full_target[:11] + [EOS] and len(target) <= 12
            cut["source"] += [len(full_source) + 2 - 24] if len(full_source) + 2 > 24 else []
            cut["target"] += [len(full_target) + 1 - 12] if len(full_target) + 1 > 12 else []
            assert reference["id"] == example["record"].get("id", example["origin"])
            # The reference keeps the whole summary, one sentence per line.
            assert reference["reference"] == "\n".join(example["sentences"])
        st = result["splits"][split]
        assert st["pairs"] == len(examples_in_split)
        for side in ("source", "target"):
            truncated = st[f"truncated_{side}s"]
            assert truncated["count"] == len(cut[side]) and truncated["tokens_cut"] == sum(cut[side])
            assert truncated["max_cut"] == max(cut[side], default=0)
    assert sum(result["splits"][s]["truncated_sources"]["count"] for s in expected) > 5  # the limit bites

    assert result["empty_side"]["count"] == 1
    assert result["empty_side"]["examples"][0]["origin"] == f"{path}:6"
    assert result["skipped"]["count"] == 4
    assert result["skipped"]["by_reason"] == {
        "malformed JSON": 1,
        "no field 'summary'": 1,
        "field 'document' is not text": 1,
        "not a JSON object": 1,
    }
    assert [e["origin"] for e in result["skipped"]["examples"]] == [f"{path}:{n}" for n in (4, 5, 7, 8)]


def test_arxiv_files_rerun_as_a_no_op_and_a_dropped_split_goes(bpe, tmp_path, capsys):
    rng = np.random.default_rng(2)

    def arxiv_line(i: int) -> str:
        abstract = [f"<S> {s.lower()[:-1]} . </S>" for s in sentences(rng, 2, words=5)]
        article = [s.lower() for s in sentences(rng, 3)]
        return json.dumps(
            {
                "article_id": f"{1000 + i}",
                "article_text": article,
                "abstract_text": abstract,
                "section_names": ["introduction"],
                "sections": [article],
            }
        )

    files = {}
    for split, name, n in (("train", "train.txt", 12), ("valid", "val.txt", 3), ("test", "test.txt", 3)):
        files[split] = tmp_path / name
        files[split].write_text("\n".join(arxiv_line(i) for i in range(n)) + "\n")
    out = tmp_path / "out"
    args = ["--format", "arxiv", "--out", out, "--workers", "2", *bpe.args()]
    code, _, _ = run(capsys, *args, "--train", files["train"], "--valid", files["valid"], "--test", files["test"])
    assert code == 0

    pairs, references = load_split(out, "valid")
    records = [json.loads(line) for line in files["valid"].read_text().splitlines()]
    for (source, target), reference, record in zip(pairs, references, records, strict=True):
        assert bpe.decode(source[1:-1]) == " ".join(record["article_text"])
        sentences_ = [s.removeprefix("<S> ").removesuffix(" </S>") for s in record["abstract_text"]]
        assert reference == {"id": record["article_id"], "reference": "\n".join(sentences_)}
        assert bpe.decode(target[:-1]) == " ".join(sentences_)

    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    code, stdout, _ = run(capsys, *args, "--train", files["train"], "--valid", files["valid"], "--test", files["test"])
    assert code == 0 and "up to date" in stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before

    # Without --test, test's files must not outlive the run that made them.
    code, _, _ = run(capsys, *args, "--train", files["train"], "--valid", files["valid"])
    assert code == 0
    assert not list(out.glob("test.*")) and (out / "valid.references.jsonl").is_file()
    assert set(json.loads((out / "prep.json").read_text())["splits"]) == {"train", "valid"}


def test_clear_errors(bpe, pairs_jsonl, tmp_path, capsys):
    path, examples = pairs_jsonl
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    fields = ["--source-field", "document", "--target-field", "summary"]
    # --no-truncate names the first pair over the limit, and its length.
    sizes = [len(bpe.encode(e["record"]["document"])) + 2 for e in examples]
    longest = examples[sizes.index(max(sizes))]["record"]
    over = f"(id {longest['id']!r}): the source is {max(sizes)} tokens, over --max-source-tokens {max(sizes) - 1}"
    no_dict = [*bpe.args()[:4], "--dict", tmp_path / "nodict"]
    only_empty = tmp_path / "empty.jsonl"
    only_empty.write_text(json.dumps({"document": "A document.", "summary": []}) + "\n")
    for args, message in [
        (["--format", "jsonl", "--train", path, "--source-field", "text", "--target-field", "summary"], "no line has"),
        (["--format", "jsonl", "--train", only_empty, *fields], "no pair to write (lines dropped: 1; the first: "),
        (["--format", "arxiv", "--train", path], "no line has the fields 'article_text' and 'abstract_text'"),
        (["--format", "jsonl", "--input", path, *fields, "--no-truncate", "--max-source-tokens", max(sizes) - 1], over),
        (["--format", "jsonl", "--train", path], "name the fields with --source-field and --target-field"),
        (["--format", "papers"], "give at least one of --train, --valid, --test, or one --input"),
        (["--format", "papers", "--train", path, "--input", path], "not both"),
        (["--format", "papers", "--train", tmp_path / "missing.jsonl"], "missing.jsonl not found"),
        (["--format", "jsonl", "--train", path, *fields, "--out", tmp_path / "used"], "did not write (notes.txt)"),
        (["--format", "jsonl", "--train", path, *fields, *no_dict], "nodict: not found"),
    ]:
        if "--out" not in args:
            args = args + ["--out", tmp_path / "o"]
        if "--dict" not in args:
            args = args + bpe.args()
        code, _, err = run(capsys, *args, "--workers", "1")
        last = err.strip().splitlines()[-1]  # after the progress bars
        assert code == 2 and message in last and last.startswith("longformer-fs: error:"), (args, err)
    assert not (tmp_path / "o").exists()  # a failed run leaves nothing behind
