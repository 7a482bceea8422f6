"""``longformer-fs prep docs``: long-document corpora as fairseq masked-LM datasets."""

from __future__ import annotations

import argparse
import os

from data_prep.doc_corpus import DocPrepConfig, prepare_docs, stats_table
from data_prep.doc_sources import SourceSpec

from .options import add_output_arguments, config_from_args, dropped_report, run_preparation
from .subword_options import add_subword_arguments


def _named(kind):
    def parse(text: str):
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
        try:
            return name, kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a valid {kind.__name__}") from None

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read long documents from named sources (folders of .txt files, .jsonl files, Wikipedia XML dumps, "
        "PDF papers), drop exact duplicates, sample and filter each source, tokenize with GPT-2 byte-level "
        "BPE mapped to the model's dict.txt, and write train/valid/test in fairseq's format with document "
        "boundaries kept (blank-line convention: sample_break_mode=complete_doc works). Also writes "
        "stats.json (a per-source table) and papers.jsonl ({source, title, abstract, body} of every PDF). "
        "Bad files are reported and skipped; a run that keeps no document, or too few for the splits asked for "
        "(valid and test get at least one document each when their fraction is above 0), stops with an error. "
        "Rerunning with the same inputs does nothing."
    )
    parser.add_argument(
        "--source",
        dest="sources",
        action="append",
        required=True,
        metavar="NAME=KIND:PATH",
        help="an input, repeatable; KIND is txt (folder of .txt, one document per file), jsonl, "
        "wiki (.xml or .xml.bz2 dump) or pdf (file or folder); e.g. realnews=jsonl:rn.jsonl",
    )
    per_source = (
        ("--text-field", str, "NAME=FIELD", "the JSONL field holding the text of source NAME (default: text)"),
        ("--min-tokens", int, "NAME=N", "drop documents of source NAME shorter than N tokens (paper: realnews=1200)"),
        ("--fraction", float, "NAME=F", "keep this fraction of source NAME's documents (paper: realnews=0.333)"),
    )
    for flag, kind, metavar, help_text in per_source:
        parser.add_argument(flag, action="append", default=[], type=_named(kind), metavar=metavar, help=help_text)
    add_subword_arguments(parser)
    parser.add_argument(
        "--valid-fraction",
        type=float,
        default=0.01,
        help="share of documents for valid, at least one document when above 0 (the lowest hashes of the text "
        "after test's)",
    )
    parser.add_argument(
        "--test-fraction",
        type=float,
        default=0.01,
        help="share of documents for test, at least one document when above 0 (the lowest hashes of the text)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="processes for PDF extraction and tokenizing (default: all cores)",
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    fields = dict(args.text_field)
    specs = []
    for text in args.sources:
        spec = SourceSpec.parse(text)
        specs.append(SourceSpec(spec.name, spec.kind, spec.path, fields.get(spec.name, "text")))
    cfg = config_from_args(
        DocPrepConfig, args, sources=tuple(specs), min_tokens=dict(args.min_tokens), fractions=dict(args.fraction)
    )
    return run_preparation(prepare_docs, cfg, args, stats_table, _report)


def _report(result: dict):
    papers = result["papers"]
    if papers["count"]:
        found = ", ".join(f"{n:,} by {how}" for how, n in sorted(papers["abstract_found"].items()) if how != "none")
        yield f"papers {papers['count']:,}: abstracts found {found or 'in none'}"
        if papers["without_abstract"]["count"]:
            yield from dropped_report("papers without an abstract (kept: their body):", papers["without_abstract"])
    yield from dropped_report("skipped", result["skipped"])
