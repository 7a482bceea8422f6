"""``longformer-fs prep hotpotqa``: HotpotQA's files as released (distractor and full-wiki
settings, the test file without labels) as one sequence per question with answer,
question-type and evidence labels."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

from data_prep.hotpotqa import HotpotqaConfig, prepare_hotpotqa, stats_table

from ..conventions import HOTPOTQA_SYMBOLS
from .options import (
    add_output_arguments,
    add_split_arguments,
    config_from_args,
    dropped_report,
    run_preparation,
    symbol_report,
)
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize HotpotQA's JSON (hotpot_train_v1.1.json, hotpot_dev_distractor_v1.json, "
        "hotpot_dev_fullwiki_v1.json, hotpot_test_fullwiki_v1.json) into one sequence per question, '<s> [q] "
        "question [/q] [p] title [s] sentence [s] sentence ... [p] title ...' with all its paragraphs, and its "
        "labels: question type (span/yes/no), supporting paragraphs and sentences, and every occurrence of the "
        "answer in a supporting sentence. A supporting fact that points at no sentence of the context (its title "
        "was not retrieved, or its index is past the paragraph's end) is skipped and counted, its question kept. "
        "A file without answers and supporting facts (the test file) is prepared without labels, as --test only: "
        "eval-hotpotqa writes its predictions. dict.txt is the model's with "
        f"{' '.join(HOTPOTQA_SYMBOLS)} appended (extend the model's embeddings with convert-roberta --add-tokens). "
        "Sequences longer than --max-tokens are cut and counted. Rerunning with the same inputs does nothing."
    )
    add_split_arguments(
        parser,
        "JSON file (HotpotQA's; for --test also one without answers, as hotpot_test_fullwiki_v1.json)",
        "one JSON file to split by _id",
        "questions",
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
    return run_preparation(prepare_hotpotqa, cfg, args, stats_table, report)


def report(result: dict) -> Iterator[str]:
    """The symbols' ids, then per split what the table does not show: a split without
    labels, the supporting facts skipped, and the questions kept without a supporting
    fact or without paragraphs."""
    yield from symbol_report(result)
    for split, st in result["splits"].items():
        if not st.get("labelled", True):  # a run from before unlabelled splits has no such key
            yield (
                f"{split}: no answers or supporting facts (a test file): not for training; eval-hotpotqa --split "
                f"{split} --predictions FILE writes its predictions, in HotpotQA's format"
            )
        if st.get("skipped_facts", {}).get("count"):
            yield from dropped_report(f"{split}: supporting facts skipped (their questions kept):", st["skipped_facts"])
        if st.get("no_supporting_fact"):
            count = st["no_supporting_fact"]
            yield f"{split}: questions left without a supporting fact (kept, every [p] and [s] 0): {count:,}"
        if st.get("empty_context"):
            yield f"{split}: questions without paragraphs (kept, the question alone): {st['empty_context']:,}"
