"""``longformer-fs prep qa``: TriviaQA's release or SQuAD-style JSON as windows with gold answer positions."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

from data_prep.qa import FORMATS, QaPrepConfig, prepare_qa, stats_table

from .options import add_output_arguments, add_split_arguments, config_from_args, dropped_report, run_preparation
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize questions and contexts with character offsets and write, per split, one item per model "
        "input window '<s> question </s> document </s>': {split}.tokens, the gold start/end token positions "
        "({split}.starts, {split}.ends), each token's context characters ({split}.offsets), plus "
        "{split}.windows.jsonl and {split}.examples.jsonl for evaluation. TriviaQA: the release's qa/*.json "
        "files as they come; one example per (question, document), the documents being a Wikipedia file's "
        "entity pages (evidence/wikipedia/) and a Web file's entity pages and search results (evidence/web/); "
        "gold spans are every occurrence of every answer alias in the document, matched after normalisation. "
        "A verified file (verified-*-dev.json) keeps only what the official script scores; a test file without "
        "answers is written without gold positions, for eval-qa to predict; questions without evidence are "
        "counted and dropped. SQuAD: the given spans. Examples whose answer is in no window are skipped in train "
        "and kept in valid/test. The manifest records the format, so eval-qa scores answers by that dataset's "
        "official convention. Rerunning with the same inputs does nothing."
    )
    parser.add_argument("--format", choices=FORMATS, required=True, help="the input JSON's format")
    add_split_arguments(
        parser,
        "JSON file",
        "one JSON file to split by question (TriviaQA) or article (SQuAD)",
        "questions (TriviaQA) or articles (SQuAD)",
    )
    parser.add_argument(
        "--evidence",
        type=Path,
        help="TriviaQA's evidence directory, holding wikipedia/<Filename> (entity pages) and web/<Filename> (search "
        "results); triviaqa only",
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="tokens per window, <s> and both </s> included; longer documents are truncated (the paper's setting)",
    )
    parser.add_argument(
        "--doc-stride",
        type=int,
        metavar="N",
        help="instead of truncating, cut documents into windows that each fit, starting N document tokens "
        "apart (at most the room a window has, so windows never leave gaps)",
    )
    add_output_arguments(parser)


def report(result: dict) -> Iterator[str]:
    """TriviaQA's questions and documents that gave no example, by reason."""
    if result["format"] == "triviaqa":
        yield from dropped_report("questions dropped:", result["questions_dropped"])
        yield from dropped_report("documents dropped:", result["documents_dropped"])


def main(args: argparse.Namespace) -> int:
    return run_preparation(prepare_qa, config_from_args(QaPrepConfig, args), args, stats_table, report)
