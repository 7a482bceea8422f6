"""``longformer-fs prep wikihop``: WikiHop as prefix (question + candidates) and context items."""

from __future__ import annotations

import argparse

from data_prep.wikihop import WikihopConfig, prepare_wikihop, stats_table

from ..conventions import WIKIHOP_SYMBOLS
from .options import add_output_arguments, add_split_arguments, config_from_args, run_preparation, symbol_report
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize WikiHop's JSON into, per example, a prefix '<s> [q] question [/q] [ent] c1 [/ent] ...', a "
        "context '</s> support1 </s> support2 </s> ...' and the answer's index among the candidates. "
        f"dict.txt is the model's with {' '.join(WIKIHOP_SYMBOLS)} appended (extend the model's embeddings "
        "with convert-roberta --add-tokens). Prints how many examples exceed --max-tokens and how many "
        "prefix-repeating chunks they need. Rerunning with the same inputs does nothing."
    )
    add_split_arguments(
        parser, "JSON file (WikiHop's train.json, dev.json)", "one JSON file to split by example id", "examples"
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="the model's length, for the stats (examples over it, chunks)"
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    return run_preparation(prepare_wikihop, config_from_args(WikihopConfig, args), args, stats_table, symbol_report)
