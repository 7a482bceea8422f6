"""``longformer-fs prep hotpotqa``: HotpotQA (distractor setting) as one sequence per question with
answer, question-type and evidence labels."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.hotpotqa import HotpotqaConfig, prepare_hotpotqa, stats_table
from longformer_fs.conventions import HOTPOTQA_SYMBOLS

from .options import add_output_arguments, add_split_arguments, print_done, run_preparation, split_files
from .subword_options import add_subword_arguments, subword_spec


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
    cfg = HotpotqaConfig(
        subword_spec(args),
        split_files(args),
        args.max_tokens,
        args.input,
        args.valid_fraction,
        args.test_fraction,
        tuple(args.evidence),
    )
    result, seconds = run_preparation(prepare_hotpotqa, cfg, args, stats_table)
    print("symbol ids: " + ", ".join(f"{symbol}={i}" for symbol, i in result["symbols"].items()))
    print_done(args, seconds)
    return 0
