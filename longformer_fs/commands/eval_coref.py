"""``longformer-fs eval-coref``: MUC, B³, CEAF-φ4 and CoNLL F1 of a ``longformer_coref``
checkpoint on a ``prep coref`` split."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import output
from ..checkpoint import load_model
from ..evaluation.coref import predict_split, score_split
from ..evaluation.coref_metrics import METRICS
from ..tasks.coref import CorefTask
from .options import add_device_argument, add_evaluation_arguments

NAMES = {"muc": "MUC", "b_cubed": "B3", "ceaf_e": "CEAF-phi4"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read every document of a `prep coref` split with a longformer_coref checkpoint (segments as in "
        "training, no global attention), link each kept span to its best antecedent, chain the links into "
        "clusters, map them back to word spans and score them against the gold clusters with MUC, B3 and "
        "CEAF-phi4 (precision, recall, F1) and the CoNLL F1, their mean; singletons are dropped from the key, "
        "as in CoNLL-2012."
    )
    add_evaluation_arguments(
        parser, "a checkpoint fine-tuned with --task longformer_coref", "the `prep coref` directory"
    )
    add_device_argument(parser)
    parser.add_argument(
        "--predictions", type=Path, default=None, help="write one {id, part, clusters (word spans)} per line here"
    )
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def main(args: argparse.Namespace) -> int:
    if not (args.data / "dict.txt").is_file():
        raise FileNotFoundError(
            f"--data: {args.data / 'dict.txt'} not found; prepare it with `longformer-fs prep coref`"
        )
    model, task = load_model(args.checkpoint, args.data, args.device)
    if not isinstance(task, CorefTask):
        raise ValueError(f"{args.checkpoint}: trained with task {type(task).__name__}, not longformer_coref")
    task.load_dataset(args.split)
    predictions = predict_split(model, task, args.split, args.device)
    scores = score_split(task, args.split, predictions)
    if args.predictions:
        output.write_text(args.predictions, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
    if args.json:
        print(json.dumps(scores, indent=2))
        return 0
    for name in METRICS:
        s = scores[name]
        print(f"{args.split} {NAMES[name]:<10} P {s['precision']:6.2f}  R {s['recall']:6.2f}  F1 {s['f1']:6.2f}")
    print(f"{args.split} CoNLL F1 {scores['conll_f1']:.2f} over {scores['documents']} documents")
    return 0
