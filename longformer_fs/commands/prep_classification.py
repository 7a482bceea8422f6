"""``longformer-fs prep classification``: labelled documents for fairseq's sentence_prediction task."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.classification import ClassificationConfig, prepare_classification, stats_table

from .options import SPLIT_NAMES, add_output_arguments, comma_triple, config_from_args, run_preparation
from .subword_options import add_subword_arguments

_weights = comma_triple(float, lambda weights: not (min(weights) < 0 or weights[0] <= 0), "weights (>= 0, TRAIN > 0)")


def _labels(text: str) -> tuple[str, ...]:
    labels = tuple(label.strip() for label in text.split(","))
    if not all(labels):
        raise argparse.ArgumentTypeError(f"expected comma-separated labels, got {text!r}")
    return labels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize labelled documents (JSONL, or TSV with a header row) and write them in the layout of "
        "fairseq's sentence_prediction task: input0/{split}.{bin,idx} + input0/dict.txt (token ids, </s>; "
        "the task's --init-token 0 adds <s>) and label/{split}.{bin,idx} + label/dict.txt (targets 0..K-1 in "
        "label order). Documents are not truncated (use the task's --shorten-method truncate). Prints per "
        "split the documents, label counts and token lengths. Rerunning with the same inputs does nothing."
    )
    data = parser.add_argument_group(
        "inputs", "Either --train (with --valid/--test) files, or one --input cut by --split."
    )
    for split in SPLIT_NAMES:
        data.add_argument(f"--{split}", type=Path, help=f"the {split} documents (.jsonl or .tsv)")
    data.add_argument("--input", type=Path, help="one .jsonl or .tsv file to split into train/valid/test")
    data.add_argument(
        "--split",
        type=_weights,
        default="80,10,10",
        metavar="TRAIN,VALID,TEST",
        help="relative weights of the splits of --input; documents ranked by a seeded hash of their text, a "
        "split with a weight above 0 gets at least one (a weight 0 leaves that split out)",
    )
    data.add_argument("--seed", type=int, default=1, help="seed of the hash that splits --input")
    data.add_argument("--text-field", default="text", help="JSONL key / TSV header of the text")
    data.add_argument("--label-field", default="label", help="JSONL key / TSV header of the label")
    data.add_argument("--text-column", type=int, help="1-based text column of TSV files without a header row")
    data.add_argument("--label-column", type=int, help="1-based label column of TSV files without a header row")
    data.add_argument(
        "--labels",
        type=_labels,
        metavar="A,B,...",
        help="the labels in class order (booleans are written true/false); if not given, the training labels, sorted",
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--report-length",
        type=int,
        default=4096,
        help="count the documents longer than this many tokens (<s> and </s> included) in the stats",
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(ClassificationConfig, args, split_weights=args.split)
    return run_preparation(prepare_classification, cfg, args, stats_table, _label_report)


def _label_report(result: dict):
    yield f"labels (class 0..{len(result['labels']) - 1}): {', '.join(result['labels'])}"
