"""``longformer-fs prep docs`` on inputs the tests build: PDFs (fpdf2), a Wikipedia XML
dump, JSONL with bad lines, text folders, and a GPT-2-style BPE trained here."""

import bz2
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import cli

from data_prep import doc_sources
from data_prep.doc_corpus import DocPrepConfig, prepare_docs
from data_prep.doc_sources import SourceSpec
from data_prep.gpt2_bpe import train_bpe
from data_prep.pdf_papers import NO_HEADING_NO_PROSE, read_paper
from data_prep.wikitext import iter_wiki_pages, strip_markup
from longformer_fs.conventions import NUM_SPECIALS
from longformer_fs.tokenization import SubwordSpec

HEADER = "Proceedings of the Test Conference 2026"

WIKI = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
  <page><title>Sliding windows</title><ns>0</ns><id>1</id><revision><text xml:space="preserve">{{Infobox thing|name=x|{{nested|y}}}}
'''Sliding windows''' are used in [[attention (machine learning)|attention]] models.&lt;ref&gt;A source.&lt;/ref&gt;
== History ==
They were described in [[Longformer]] and [https://example.org a paper].
[[File:Band.png|thumb|A [[band]] matrix]]
{| class="wikitable"
| a || b
|}
* A list item with &amp; an entity.
[[Category:Attention]]</text></revision></page>
  <page><title>Sliding window</title><ns>0</ns><id>2</id><redirect title="Sliding windows" /><revision><text>#REDIRECT [[Sliding windows]]</text></revision></page>
  <page><title>Talk:Sliding windows</title><ns>1</ns><id>3</id><revision><text>Talk page text.</text></revision></page>
  <page><title>Dilation</title><ns>0</ns><id>4</id><revision><text>Dilation skips positions in a window.</text></revision></page>
</mediawiki>
"""


# ---------------------------------------------------------------- PDFs built here


def make_pdf(path, pages, title=None, encrypt=False):
    """pages: lists of (x, y, text) in mm; the running header and a page number are added."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.core_fonts_encoding = "windows-1252"  # WinAnsi: has the em dash of "Abstract\u2014"
    if title:
        pdf.set_title(title)
    if encrypt:
        pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.set_font("helvetica", size=10)
    for number, lines in enumerate(pages, 1):
        pdf.add_page()
        pdf.text(20, 10, HEADER)
        for x, y, text in lines:
            pdf.text(x, y, text)
        pdf.text(105, 290, str(number))
    pdf.output(str(path))


def column(x, lines, top=30):
    return [(x, top + 6 * i, line) for i, line in enumerate(lines)]


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pdfs")
    make_pdf(
        d / "two_column.pdf",
        [
            column(
                20,
                [
                    "Sparse Attention for Long Documents",
                    "A. Author and B. Author",
                    "Abstract",
                    "We study long docu-",
                    "ments with sparse attention.",
                ],
            )
            + column(20, ["1 Introduction", "Long inputs are com-", "mon in practice."], top=70)
            + column(110, ["Transformers are quad-", "ratic in length."], top=70),
            column(20, ["2 Method", "The left column ends here."])
            + column(110, ["The right column fol-", "lows it. Transformer-", "XL stays."]),
        ],
        title="Sparse Attention for Long Documents",
    )
    make_pdf(
        d / "ieee.pdf",
        [
            column(
                20,
                [
                    "Banded Kernels",
                    "C. Author",
                    "Abstract\u2014We compute the band",
                    "directly.",
                    "I. INTRODUCTION",
                    "Dense attention wastes work.",
                ],
            ),
            column(20, ["II. METHOD", "Tiles."]),
        ],
    )
    make_pdf(
        d / "no_abstract.pdf", [column(20, ["Notes on Windows", "Windows are local."]), column(20, ["That is all."])]
    )
    (d / "corrupt.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage without xref\n")
    make_pdf(d / "encrypted.pdf", [column(20, ["Secret", "Abstract", "Hidden."])], encrypt=True)
    return d


def test_pdf_sections_hyphenation_columns_and_furniture(pdfs):
    paper = read_paper(pdfs / "two_column.pdf")
    assert paper.title == "Sparse Attention for Long Documents"
    assert paper.abstract == "We study long documents with sparse attention."
    assert paper.body.startswith("1 Introduction\nLong inputs are common in practice. Transformers are quadratic")
    assert "\n2 Method\nThe left column ends here. The right column follows it. Transformer-XL stays." in paper.body
    assert HEADER not in paper.body and " 2 " not in paper.body.replace("2 Method", "")


def test_pdf_ieee_style_headings(pdfs):
    paper = read_paper(pdfs / "ieee.pdf")
    assert paper.title == "Banded Kernels"
    assert paper.abstract == "We compute the band directly."
    assert paper.body == "I. INTRODUCTION\nDense attention wastes work.\nII. METHOD\nTiles."


def test_pdf_without_abstract_keeps_text_as_body(pdfs):
    paper = read_paper(pdfs / "no_abstract.pdf")
    assert paper.abstract is None
    assert paper.body == "Windows are local. That is all."  # a paragraph goes on over the page
    assert paper.abstract_missing == NO_HEADING_NO_PROSE


def test_wikitext_is_stripped_and_dump_streamed(tmp_path):
    (tmp_path / "dump.xml").write_text(WIKI)
    pages = list(iter_wiki_pages(tmp_path / "dump.xml"))
    assert [title for title, _ in pages] == ["Sliding windows", "Dilation"]  # no redirect, no talk page
    text = pages[0][1]
    assert text.splitlines() == [
        "Sliding windows are used in attention models.",
        "History",
        "They were described in Longformer and a paper.",
        "A list item with & an entity.",
    ]
    assert strip_markup("[[Image:x.png|a [[b]] c]] kept") == "kept"


# ---------------------------------------------------------------- a whole run


def documents_text(seed, n, words=120):
    rng = np.random.default_rng(seed)
    vocab = [
        "window",
        "attention",
        "band",
        "token",
        "kernel",
        "layer",
        "global",
        "local",
        "sparse",
        "dense",
        "the",
        "a",
        "of",
        "long",
        "document",
        "model",
        "résumé",
        "naïve",
    ]
    return [" ".join(rng.choice(vocab, words)) + ".\n" + " ".join(rng.choice(vocab, words // 2)) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pdfs):
    d = tmp_path_factory.mktemp("docs")
    books = documents_text(0, 12)
    (d / "books").mkdir()
    for i, text in enumerate(books):
        (d / "books" / f"book{i:02d}.txt").write_text(text, encoding="utf-8")
    (d / "books" / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    news = documents_text(1, 40, words=40) + documents_text(2, 10, words=1000)
    lines = [json.dumps({"title": f"n{i}", "body": t}) for i, t in enumerate(news)]
    lines[3:3] = ["{not json", json.dumps({"title": "no body"}), json.dumps(["a", "list"])]
    lines.append(json.dumps({"body": books[0]}))  # an exact duplicate of a book
    (d / "news.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"body": "\xff\xfe"}\n')
    (d / "wiki.xml").write_text(WIKI)
    # Two bz2 streams, the second cut short. A dump is read in 16 KiB chunks: the first
    # page ends chunks before the damage and must survive (the long one is lost with it).
    long_wiki = WIKI.replace("Dilation skips", "Windows slide. " * 3000 + "Dilation skips")
    long_wiki = long_wiki.replace("<title>Dilation</title>", "<title>Long</title>")
    cut = long_wiki.index("</page>", long_wiki.index("<title>Long")) + len("</page>")
    (d / "truncated.xml.bz2").write_bytes(
        bz2.compress(long_wiki[:cut].encode()) + bz2.compress(long_wiki[cut:].encode())[:-40]
    )
    every_text = books + news + [t for _, t in iter_wiki_pages(d / "wiki.xml")]
    papers = [read_paper(p) for p in sorted(pdfs.glob("[int]*.pdf"))]
    tokenizer = train_bpe(every_text + [p.body for p in papers] + [p.abstract or "" for p in papers], d, 300)
    return d, tokenizer, books, news


def gpt2(d: Path) -> SubwordSpec:
    return SubwordSpec.gpt2(d / "encoder.json", d / "vocab.bpe", d / "dict.txt")


def train_spm(texts: list[str], path: Path, size: int = 200) -> Path:
    """A SentencePiece model trained by sentencepiece's own trainer on ``texts``."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(path), vocab_size=size, hard_vocab_limit=False, minloglevel=2
    )
    return path.with_suffix(".model")


def tokenizer_args(d: Path) -> list:
    """prep's options for the GPT-2-style BPE the corpus fixture trained in ``d``."""
    return ["--encoder-json", d / "encoder.json", "--vocab-bpe", d / "vocab.bpe", "--dict", d / "dict.txt"]


def prep_docs(*args):
    """``longformer-fs prep docs ARGS`` in this process (its tokenizing workers are spawned
    processes of their own, as for users)."""
    return cli("prep", "docs", *args)


def run_prep(corpus, pdfs, out, *extra):
    d = corpus[0]
    sources = ["--source", f"books=txt:{d / 'books'}", "--source", f"news=jsonl:{d / 'news.jsonl'}",
               "--text-field", "news=body", "--source", f"wiki=wiki:{d / 'wiki.xml'}",
               "--source", f"wiki=wiki:{d / 'truncated.xml.bz2'}", "--source", f"papers=pdf:{pdfs}"]  # fmt: skip
    result = prep_docs("--out", out, *tokenizer_args(d), *sources, "--min-tokens", "news=1000", "--valid-fraction",
                       "0.2", "--test-fraction", "0.1", "--workers", "2", *extra)  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    return result.stdout


def read_documents(out: Path, split: str):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(out / split), None, "mmap")
    docs, current = [], []
    for i in range(len(dataset)):
        item = dataset[i].tolist()
        assert item[-1] == 2  # every item ends in </s>
        if item == [2]:
            docs.append(current)
            current = []
        else:
            current.append(item[:-1])
    assert current == []  # the last document is closed too
    return docs


@pytest.fixture(scope="module")
def prepared(corpus, pdfs, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "bin"
    stdout = run_prep(corpus, pdfs, out)
    return out, stdout


def test_run_reports_stats_and_every_skip(prepared):
    out, stdout = prepared
    stats = json.loads((out / "stats.json").read_text())
    src = stats["sources"]
    assert src["books"]["documents"] == 12 and src["books"]["skipped"] == 1  # latin-1 file
    assert src["news"]["too_short"] == 40 and src["news"]["documents"] == 10  # --min-tokens news=1000
    assert src["news"]["duplicate"] == 1 and src["news"]["skipped"] == 4
    # wiki.xml's 2 articles; the damaged dump gives the first again (read before the damage).
    assert src["wiki"]["documents"] == 2 and src["wiki"]["skipped"] == 1 and src["wiki"]["duplicate"] == 1
    assert src["papers"]["documents"] == 3 and src["papers"]["skipped"] == 2  # corrupt + encrypted
    reasons = stats["skipped"]["by_reason"]
    assert reasons["malformed JSON"] == 1 and reasons["not UTF-8 text"] == 2
    assert reasons["encrypted"] == 1 and reasons["unreadable PDF"] == 1
    assert reasons["truncated file"] == 1
    papers = stats["papers"]
    assert papers["count"] == 3 and papers["abstract_found"] == {"heading": 2, "none": 1}
    assert papers["without_abstract"]["by_reason"] == {NO_HEADING_NO_PROSE: 1}
    assert papers["without_abstract"]["examples"][0]["origin"].endswith("no_abstract.pdf")
    assert "papers 3: abstracts found 2 by heading" in stdout
    assert f"no_abstract.pdf: {NO_HEADING_NO_PROSE}" in stdout
    for name in ("books", "news", "wiki", "papers", "total", "skipped 8"):
        assert name in stdout
    # The split table: each split's documents and tokens, as the manifest records them.
    splits = json.loads((out / "prep.json").read_text())["splits"]
    assert sum(v["documents"] for v in splits.values()) == 12 + 10 + 2 + 3
    rows = [line.split() for line in stdout.splitlines()]
    for split, counts in splits.items():
        assert [split, f"{counts['documents']:,}", f"{counts['tokens']:,}"] in rows
    assert "news.jsonl:4: malformed JSON" in stdout
    papers = [json.loads(line) for line in (out / "papers.jsonl").read_text().splitlines()]
    assert {p["title"] for p in papers} == {"Sparse Attention for Long Documents", "Banded Kernels", "Notes on Windows"}
    fields = {"title", "authors", "abstract", "keywords", "body", "references", "found", "abstract_missing"}
    assert set(papers[0]) == {"source", "file"} | fields


def test_ids_round_trip_and_documents_stay_whole(prepared, corpus):
    out, _ = prepared
    d, tokenizer, books, news = corpus
    symbols = [int(line.split()[0]) for line in (d / "dict.txt").read_text().splitlines()]
    decoded = []
    for split in ("train", "valid", "test"):
        for doc in read_documents(out, split):
            paragraphs = [tokenizer.decode([symbols[i - NUM_SPECIALS] for i in p]) for p in doc]
            decoded.append("\n".join(paragraphs))
    expected = books + news[40:]
    for text in expected:
        assert text.strip() in decoded
    assert len(decoded) == 12 + 10 + 2 + 3
    splits = json.loads((out / "prep.json").read_text())["splits"]
    assert all(splits[s]["documents"] > 0 for s in ("train", "valid", "test"))


def test_masked_lm_task_loads_it_and_complete_doc_blocks_stay_in_one_document(prepared):
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    out, _ = prepared
    task = MaskedLMTask.setup_task(
        MaskedLMConfig(data=str(out), tokens_per_sample=64, sample_break_mode="complete_doc", seed=1)
    )
    task.load_dataset("train")
    dataset = task.dataset("train")
    assert len(dataset) > 0 and dataset[0]["net_input.src_tokens"][0] == task.source_dictionary.bos()
    # The blocks masked_lm cuts (complete_doc, 63 tokens + <s>) each lie inside one document.
    from fairseq.data import TokenBlockDataset, data_utils

    documents = [[t for p in doc for t in p + [2]] for doc in read_documents(out, "train")]
    raw = data_utils.load_indexed_dataset(str(out / "train"), task.source_dictionary, "mmap")
    blocks = TokenBlockDataset(raw, raw.sizes, 63, pad=1, eos=2, break_mode="complete_doc")
    assert len(blocks) > len(documents)  # long documents span several blocks
    for i in range(len(blocks)):
        tokens = [t for t in blocks[i].tolist() if t != 2]
        assert any(_contains([t for t in doc if t != 2], tokens) for doc in documents), tokens[:10]


def _contains(run, part):
    n = len(part)
    return any(run[i : i + n] == part for i in range(len(run) - n + 1))


def test_rerun_is_a_no_op(prepared, corpus, pdfs):
    out, _ = prepared
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    stdout = run_prep(corpus, pdfs, out)
    assert "up to date" in stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_interrupted_run_never_looks_complete(corpus, tmp_path, monkeypatch):
    d = corpus[0]
    cfg = DocPrepConfig((SourceSpec("books", "txt", d / "books"),), gpt2(d), workers=1)

    def dies(spec, path):
        yield from ()
        raise KeyboardInterrupt

    monkeypatch.setitem(doc_sources.READERS, "txt", dies)
    with pytest.raises(KeyboardInterrupt):
        prepare_docs(cfg, tmp_path / "out", log=lambda *_: None)
    assert not (tmp_path / "out").exists()  # nothing half-written is left, not even the directory it made
    monkeypatch.undo()
    result = prepare_docs(cfg, tmp_path / "out", log=lambda *_: None)
    assert result["sources"]["books"]["documents"] == 13 - 1  # the latin-1 file is skipped
    assert (tmp_path / "out" / "prep.json").is_file() and not (tmp_path / ".out.partial").exists()


def test_fraction_samples_deterministically(corpus, tmp_path):
    d = corpus[0]
    cfg = DocPrepConfig(
        (SourceSpec("news", "jsonl", d / "news.jsonl", "body"),),
        gpt2(d),
        fractions={"news": 0.5},
        workers=1,
    )
    first = prepare_docs(cfg, tmp_path / "a", log=lambda *_: None)["sources"]["news"]
    second = prepare_docs(cfg, tmp_path / "b", log=lambda *_: None)["sources"]["news"]
    assert first == second
    assert 10 <= first["documents"] <= 40 and first["documents"] + first["sampled_out"] == 51  # 50 + the copy of a book


def test_clear_errors(corpus, tmp_path):
    d = corpus[0]
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    (tmp_path / "no_suffix").mkdir()
    (tmp_path / "no_suffix" / "LICENSE").write_text("text in a file that does not end in .txt")
    for args, message in [
        (
            ["--source", f"x=txt:{tmp_path / 'no_suffix'}"],
            f"(0 read; --source x: no .txt file under {tmp_path / 'no_suffix'})",
        ),
        (["--source", "x=csv:/tmp"], "NAME=KIND:PATH"),
        (["--source", f"x=txt:{tmp_path / 'missing'}"], "does not exist"),
        (["--source", f"x=txt:{d / 'books'}", "--fraction", "y=0.5"], "no source named y"),
        (["--source", f"x=txt:{d / 'books'}", "--out", tmp_path / "used"], "holds files this command did not write"),
    ]:
        cmd = ["prep", "docs", *tokenizer_args(d), "--workers", "1"]
        if "--out" not in args:
            cmd += ["--out", tmp_path / "o"]
        result = cli(*cmd, *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["gpt2", "spm"])
def test_subword_offsets_point_at_the_text(corpus, tmp_path, kind):
    d, _, books, _ = corpus
    spec = gpt2(d) if kind == "gpt2" else SubwordSpec.spm(train_spm(books, tmp_path / "m"))
    encoder = spec.load()
    text = "Windows  slide over caf\u00e9s, na\u00efvely. " + books[0][:300]
    [(ids, offsets)] = encoder.encode_with_offsets([text])
    assert len(ids) == len(offsets) > 50 and (ids >= NUM_SPECIALS).mean() > 0.95
    assert (np.diff(offsets[:, 0]) >= 0).all() and (offsets[:, 1] >= offsets[:, 0]).all()
    # Every word of the text is covered by the tokens whose spans overlap it, and the
    # text between consecutive token spans is only white space.
    covered = np.zeros(len(text), dtype=bool)
    for start, end in offsets:
        covered[start:end] = True
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))
    # Character positions, not bytes: the last token ends where the text does (the accents before it
    # would push byte offsets past it).
    assert offsets[:, 1].max() == len(text.rstrip())
    assert encoder.encode([text])[0].tolist() == ids.tolist()


def test_prep_docs_with_sentencepiece_writes_its_dictionary(corpus, tmp_path):
    import sentencepiece
    from fairseq.data import Dictionary

    d, _, books, news = corpus
    model = train_spm(books + news, tmp_path / "spm", 300)
    out = tmp_path / "bin"
    args = ["--out", out, "--spm", model, "--source", f"books=txt:{d / 'books'}", "--valid-fraction", "0.2",
            "--test-fraction", "0.2", "--workers", "2"]  # fmt: skip
    result = prep_docs(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    dictionary = Dictionary.load(str(out / "dict.txt"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    assert len(dictionary) == sp.get_piece_size() - 3 + NUM_SPECIALS  # spm's <unk> <s> </s> are fairseq's
    decoded = []
    for split in ("train", "valid", "test"):
        for doc in read_documents(out, split):
            decoded.append("\n".join(sp.decode_pieces([dictionary[i] for i in p]) for p in doc))
    assert sorted(decoded) == sorted(b.strip() for b in books)
    both = prep_docs(*args, "--encoder-json", d / "encoder.json")
    assert both.returncode == 2 and "either --spm or --encoder-json" in both.stderr
