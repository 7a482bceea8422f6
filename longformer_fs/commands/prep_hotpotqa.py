"""``longformer-fs prep hotpotqa``: HotpotQA (distractor setting) as one sequence per question with
answer, question-type and evidence labels."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.hotpotqa import HotpotqaConfig, prepare_hotpotqa, stats_table
from longformer_fs.conventions import HOTPOTQA_SYMBOLS

from .options import add_output_arguments, add_split_arguments, config_from_args, run_preparation, symbol_report
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize HotpotQA's JSON (distractor setting) into one sequence per question, '<s> [q] question [/q] "
        "[p] title [s] sentence [s] sentence ... [p] title ...' with all its paragraphs, and its labels: question "
        "type (span/yes/no), supporting paragraphs and sentences, and every occurrence of the answer in a "
        f"supporting sentence. dict.txt is the model's with {' '.join(HOTPOTQA_SYMBOLS)} appended (extend the "
        "model's embeddings with convert-roberta --add-tokens). Sequences longer than --max-tokens are cut and "
        "counted. Rerunning with the same inputs does nothing."
    )
    add_split_arguments(
        parser, "JSON file (HotpotQA's, distractor setting)", "one JSON file to split by _id", "questions"
    )
    parser.add_argument(
        "--evidence",
        type=Path,
        nargs="+",
        default=(),
        metavar="JSON",
        help="two-stage variant: keep per question only the paragraphs these files list ({_id: [title, ...]}, "
        "from eval-hotpotqa --write-evidence; every question of every split must be listed)",
    )
    add_subword_arguments(parser)
    parser.add_argument("--max-tokens", type=int, default=4096, help="the model's length: longer sequences are cut")
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(HotpotqaConfig, args, evidence=tuple(args.evidence))
    return run_preparation(prepare_hotpotqa, cfg, args, stats_table, symbol_report)
