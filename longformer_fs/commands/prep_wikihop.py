"""``longformer-fs prep wikihop``: WikiHop as prefix (question + candidates) and context items."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.wikihop import WikihopConfig, prepare_wikihop, stats_table
from longformer_fs.conventions import WIKIHOP_SYMBOLS

from .options import SPLIT_NAMES, add_output_arguments, print_done, run_preparation, split_files
from .subword_options import add_subword_arguments, subword_spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize WikiHop's JSON into, per example, a prefix '<s> [q] question [/q] [ent] c1 [/ent] ...', a "
        "context '</s> support1 </s> support2 </s> ...' and the answer's index among the candidates. "
        f"dict.txt is the model's with {' '.join(WIKIHOP_SYMBOLS)} appended (extend the model's embeddings "
        "with convert-roberta --add-tokens). Prints how many examples exceed --max-tokens and how many "
        "prefix-repeating chunks they need. Rerunning with the same inputs does nothing."
    )
    for split in SPLIT_NAMES:
        parser.add_argument(f"--{split}", type=Path, help=f"the {split} JSON file (WikiHop's train.json, dev.json)")
    parser.add_argument("--input", type=Path, help="instead of split files: one JSON file to split by example id")
    parser.add_argument(
        "--valid-fraction", type=float, default=0.1, help="with --input: share of examples for valid (at least one)"
    )
    parser.add_argument(
        "--test-fraction", type=float, default=0.1, help="with --input: share of examples for test (at least one)"
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="the model's length, for the stats (examples over it, chunks)"
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    cfg = WikihopConfig(
        subword_spec(args), split_files(args), args.max_tokens, args.input, args.valid_fraction, args.test_fraction
    )
    result, seconds = run_preparation(prepare_wikihop, cfg, args, stats_table)
    ids = ", ".join(f"{symbol}={i}" for symbol, i in result["symbols"].items())
    print(f"symbol ids: {ids}")
    print_done(args, seconds)
    return 0
