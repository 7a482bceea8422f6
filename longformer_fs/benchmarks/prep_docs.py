"""``longformer-fs bench prep-docs``: end-to-end throughput of ``prep docs``.

Generates a text corpus of ``--mb`` megabytes (JSONL documents of Zipf-distributed
made-up words, in paragraphs), trains a small GPT-2-style byte-level BPE on a sample
of it, then runs the whole preparation (read, dedup, tokenize, write) once per
``--workers`` value, side by side. Reports MB of raw text per second and per worker.

``--pdfs DIR`` times the PDF reader instead, on the papers under ``DIR``: PDFs a second
on one core for our layout-aware reader (:func:`data_prep.pdf_papers.read_paper`) beside
pypdf's plain ``extract_text`` of every page, the same files in the same process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from data_prep.doc_corpus import DocPrepConfig, prepare_docs
from data_prep.doc_sources import SourceSpec
from data_prep.gpt2_bpe import train_bpe
from data_prep.pdf_papers import PdfError, read_paper
from longformer_fs.tokenization import SubwordSpec

from . import int_list


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb", type=float, default=200, help="size of the generated corpus in MB of text")
    parser.add_argument("--workers", type=int_list, default=[1, 2], help="worker counts to compare, e.g. 1,2")
    parser.add_argument("--bpe-vocab", type=int, default=8000, help="size of the BPE trained for the run")
    parser.add_argument("--out", type=Path, default=Path("bench_out/prep_docs"), help="work and results directory")
    parser.add_argument(
        "--pdfs",
        type=Path,
        default=None,
        help="a folder of PDF papers: time the PDF reader on them (PDFs/s on one core, beside pypdf's extract_text) "
        "instead of the whole preparation",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="with --pdfs: passes over the folder; the fastest counts"
    )


def generate_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """JSONL of documents (paragraphs of 40-120 words); returns the text bytes written."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = ["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(20000)]
    target, written = int(megabytes * 1e6), 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            words = np.minimum(rng.zipf(1.2, size=int(rng.integers(800, 3000))), len(vocab)) - 1
            cuts = np.cumsum(rng.integers(40, 120, size=len(words) // 40 + 1))
            paragraphs = [" ".join(vocab[w] for w in chunk) for chunk in np.split(words, cuts[cuts < len(words)])]
            text = "\n".join(p for p in paragraphs if p)
            out.write(json.dumps({"text": text}) + "\n")
            written += len(text.encode("utf-8"))
    return written


def corpus_sample(corpus: Path, sample_bytes: int = 5_000_000) -> list[str]:
    """The first documents of the corpus, about ``sample_bytes`` of text (to train the BPE on)."""
    sample, size = [], 0
    with open(corpus, encoding="utf-8") as lines:
        for line in lines:
            sample.append(json.loads(line)["text"])
            size += len(sample[-1])
            if size > sample_bytes:
                break
    return sample


def _pypdf_text(path: Path) -> None:
    from pypdf import PdfReader

    for page in PdfReader(str(path)).pages:
        page.extract_text()


def _ours(path: Path) -> None:
    try:
        read_paper(path)
    except PdfError:
        pass  # an unreadable file costs what it costs; the count says how many


def pdf_rates(files: list[Path], repeats: int) -> list[dict]:
    """Per reader, the fastest of ``repeats`` passes over ``files`` in this process: PDFs a second on one core."""
    rows = []
    for name, read in (("longformer-fs read_paper (PDFium layout)", _ours), ("pypdf extract_text", _pypdf_text)):
        best = float("inf")
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            for path in files:
                read(path)
            best = min(best, time.perf_counter() - start)
        rows.append({"reader": name, "seconds": best, "pdfs_per_s": len(files) / best})
    return rows


def bench_pdfs(args: argparse.Namespace) -> int:
    files = SourceSpec("pdfs", "pdf", args.pdfs).files() if args.pdfs.exists() else []
    if not files:
        raise SystemExit(f"--pdfs: no .pdf file under {args.pdfs}")
    import pypdfium2

    pages = unreadable = 0
    for path in files:  # also a warm-up pass before the timed ones
        try:
            pdf = pypdfium2.PdfDocument(str(path))
            pages += len(pdf)
            pdf.close()
            read_paper(path)
        except (PdfError, pypdfium2.PdfiumError):
            unreadable += 1
    rows = pdf_rates(files, args.repeats)
    print(f"PDF reading on one core: {len(files)} PDFs, {pages} pages, under {args.pdfs} ({unreadable} unreadable)")
    print(f"{'reader':<42} {'seconds':>8} {'PDFs/s':>8}")
    for r in rows:
        print(f"{r['reader']:<42} {r['seconds']:>8.2f} {r['pdfs_per_s']:>8.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdf_results.json").write_text(json.dumps({"pdfs": len(files), "pages": pages, "runs": rows}, indent=2))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.pdfs is not None:
        return bench_pdfs(args)
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = args.out / "corpus.jsonl"
    start = time.perf_counter()
    text_bytes = generate_corpus(corpus, args.mb)
    print(f"generated {text_bytes / 1e6:.0f} MB of text in {time.perf_counter() - start:.0f} s")
    train_bpe(corpus_sample(corpus), args.out, args.bpe_vocab)

    rows = []
    for workers in args.workers:
        out = args.out / f"bin-w{workers}"
        shutil.rmtree(out, ignore_errors=True)
        cfg = DocPrepConfig(
            (SourceSpec("bench", "jsonl", corpus),),
            SubwordSpec.gpt2(args.out / "encoder.json", args.out / "vocab.bpe", args.out / "dict.txt"),
            workers=workers,
        )
        start = time.perf_counter()
        stats = prepare_docs(cfg, out, log=lambda *_: None)
        seconds = time.perf_counter() - start
        tokens = sum(s["tokens"] for s in stats["splits"].values())
        rows.append(
            {
                "workers": workers,
                "seconds": seconds,
                "mb_per_s": text_bytes / 1e6 / seconds,
                "mb_per_s_per_worker": text_bytes / 1e6 / seconds / workers,
                "tokens": tokens,
            }
        )
    base = rows[0]["seconds"]
    print(f"prep docs end to end on {text_bytes / 1e6:.0f} MB ({rows[0]['tokens']:,} tokens)")
    print(f"{'workers':>8} {'seconds':>8} {'MB/s':>7} {'MB/s/worker':>12} {'speedup':>8}")
    for r in rows:
        print(
            f"{r['workers']:>8} {r['seconds']:>8.1f} {r['mb_per_s']:>7.2f} {r['mb_per_s_per_worker']:>12.2f} "
            f"{base / r['seconds']:>8.2f}"
        )
    (args.out / "results.json").write_text(json.dumps({"text_bytes": text_bytes, "runs": rows}, indent=2))
    return 0
