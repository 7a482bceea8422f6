"""``longformer-fs prep classification``: labelled documents for fairseq's sentence_prediction task."""

from __future__ import annotations

import argparse
import sys

from data_prep.classification import TSV_QUOTING, ClassificationConfig, prepare_classification, stats_table

from .options import (
    add_output_arguments,
    add_split_arguments,
    comma_triple,
    config_from_args,
    dropped_report,
    run_preparation,
)
from .subword_options import add_subword_arguments

_weights = comma_triple(float, lambda weights: not (min(weights) < 0 or weights[0] <= 0), "weights (>= 0, TRAIN > 0)")
FRACTION = 0.1  # of the documents of --input, for valid and for test


class _Default(float):
    """A fraction's default, told apart from the same number given: the deprecated --split
    may not be mixed with the fractions."""


def _labels(text: str) -> tuple[str, ...]:
    labels = tuple(label.strip() for label in text.split(","))
    if not all(labels):
        raise argparse.ArgumentTypeError(f"expected comma-separated labels, got {text!r}")
    return labels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize labelled documents and write them in the layout of fairseq's sentence_prediction task: "
        "input0/{split}.{bin,idx} + input0/dict.txt (token ids, </s>; the task's --init-token 0 adds <s>) and "
        "label/{split}.{bin,idx} + label/dict.txt (the classes 0..K-1, in label order; prep.json names them). "
        "Documents are not truncated "
        "(use the task's --shorten-method truncate). Prints per split the documents, label counts and token "
        "lengths, and what was skipped. Rerunning with the same inputs does nothing."
    )
    data = parser.add_argument_group(
        "inputs",
        "Each a file or a folder. JSONL: one object per line, with --text-field and --label-field. TSV: a header "
        "row naming the columns (pandas' unnamed index column included), or --text-column/--label-column; quoted "
        "as Python's csv module and pandas write it. A folder: one subfolder per label, named as the label, of "
        ".txt documents, as the IMDB release aclImdb/train and aclImdb/test are (<br /> becomes a newline; unsup/, "
        "unlabelled, and the files beside the label folders are skipped and counted). Give the splits as "
        "--train (with --valid/--test), or one --input that a seeded hash of each text splits.",
    )
    add_split_arguments(
        data, "documents (.jsonl, .tsv or a folder of label folders)", "one such input to split", "documents", FRACTION
    )
    parser.set_defaults(valid_fraction=_Default(FRACTION), test_fraction=_Default(FRACTION))
    data.add_argument(
        "--split",
        type=_weights,
        metavar="TRAIN,VALID,TEST",
        help="deprecated, the old spelling of --valid-fraction/--test-fraction (still honoured): relative weights "
        "of the splits of --input (80,10,10 is --valid-fraction 0.1 --test-fraction 0.1)",
    )
    data.add_argument("--seed", type=int, default=1, help="seed of the hash that splits --input")
    data.add_argument("--text-field", default="text", help="JSONL key / TSV header of the text")
    data.add_argument("--label-field", default="label", help="JSONL key / TSV header of the label")
    data.add_argument("--text-column", type=int, help="1-based text column of TSV files without a header row")
    data.add_argument("--label-column", type=int, help="1-based label column of TSV files without a header row")
    data.add_argument(
        "--tsv-quoting",
        choices=TSV_QUOTING,
        default="csv",
        help="csv: a field in double quotes may hold tabs, line breaks and doubled quotes (what Python's csv module "
        "and pandas' to_csv write); none: plain TSV, one record a line, quotes are text (GLUE's files)",
    )
    data.add_argument(
        "--labels",
        type=_labels,
        metavar="A,B,...",
        help="the labels in class order; if not given, the training labels, sorted (numerically if integers). "
        "Booleans (JSON true/false, True/FALSE in text) are the labels false,true, so true is class 1: the "
        "positive class of fairseq's --report-acc-and-f1 F1 (as pos is for IMDB's neg,pos)",
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--report-length",
        type=int,
        default=4096,
        help="count the documents longer than this many tokens (<s> and </s> included) in the stats",
    )
    add_output_arguments(parser)


def _split_fields(args: argparse.Namespace) -> dict:
    """The config's split fields: the fractions, or the weights of the deprecated --split
    (with a warning that names the fractions they equal)."""
    fractions = {"valid_fraction": float(args.valid_fraction), "test_fraction": float(args.test_fraction)}
    if args.split is None:
        return {"split_weights": None, **fractions}
    given = [
        f"--{name}-fraction"
        for name in ("valid", "test")
        if not isinstance(getattr(args, f"{name}_fraction"), _Default)
    ]
    if given:
        raise ValueError(f"--split and {' and '.join(given)}: give only the fractions (--split is their old spelling)")
    total = sum(args.split)
    print(
        f"longformer-fs: warning: --split is deprecated; --valid-fraction {args.split[1] / total:g} "
        f"--test-fraction {args.split[2] / total:g} give the same split",
        file=sys.stderr,
    )
    return {"split_weights": args.split, **fractions}


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(ClassificationConfig, args, **_split_fields(args))
    return run_preparation(prepare_classification, cfg, args, stats_table, _report)


def _report(result: dict):
    yield f"labels (class 0..{len(result['labels']) - 1}): {', '.join(result['labels'])}"
    yield from dropped_report("skipped", result["skipped"])
