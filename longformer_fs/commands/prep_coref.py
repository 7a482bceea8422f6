"""``longformer-fs prep coref``: CoNLL-2012 coreference (OntoNotes) as token, sentence,
speaker and mention items, one per document part."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.coref import CorefConfig, prepare_coref, stats_table

from .options import SPLIT_NAMES, add_output_arguments, config_from_args, run_preparation
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read CoNLL-2012 *_gold_conll files (a file, or a folder searched recursively, per split), tokenize each "
        "word with the model's BPE keeping the word of every token, and write per document part its tokens, "
        "sentence and speaker ids, gold mentions as token spans with their clusters, and "
        "{split}.examples.jsonl (words, clusters as word spans, token->word map) for eval-coref. Malformed "
        "coreference brackets are an error naming the file and line. Prints how many documents need more than "
        "one segment of --max-tokens. Rerunning with the same inputs does nothing."
    )
    for split in SPLIT_NAMES:
        parser.add_argument(f"--{split}", type=Path, help=f"the {split} *_gold_conll file or a folder of them")
    add_subword_arguments(parser)
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="the model's length, for the stats (documents over one segment)"
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    return run_preparation(prepare_coref, config_from_args(CorefConfig, args), args, stats_table)
