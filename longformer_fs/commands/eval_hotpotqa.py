"""``longformer-fs eval-hotpotqa``: HotpotQA answers and supporting facts of a ``longformer_hotpotqa``
checkpoint on a ``prep hotpotqa`` split, scored by the official rules, or only written
where the split has no labels (HotpotQA's test set)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.fairseq_dataset import read_manifest
from data_prep.hotpotqa import KIND

from .. import output
from ..checkpoint import load_model
from ..conventions import MANIFEST
from ..evaluation.hotpotqa import (
    evidence_file,
    predict_hotpotqa,
    prediction_dataset,
    prediction_file,
    score_split,
)
from .options import add_device_argument, add_evaluation_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every question of a `prep hotpotqa` split through a longformer_hotpotqa checkpoint (question, [p] and "
        "[s] global), take the answer from the type head (yes/no) or the best span of at most --max-answer-tokens "
        "cut from the sentence text, and as supporting facts the sentences scored positive in the "
        "--sp-paragraphs best-scored paragraphs. Prints answer, supporting-fact and joint EM/F1 by HotpotQA's "
        "official rules; --predictions writes HotpotQA's prediction file, --write-evidence each question's best "
        "paragraphs for the two-stage variant (prep hotpotqa --evidence). A split prepared without labels (from "
        "hotpot_test_fullwiki_v1.json) is not scored: give --predictions to write its prediction file, which "
        "the official server scores."
    )
    add_evaluation_arguments(
        parser, "a checkpoint fine-tuned with --task longformer_hotpotqa", "the `prep hotpotqa` directory"
    )
    parser.add_argument(
        "--max-answer-tokens", type=int, default=None, help="the longest answer (default: the task's, 30)"
    )
    parser.add_argument(
        "--sp-paragraphs", type=int, default=2, help="supporting facts come from this many best-scored paragraphs"
    )
    parser.add_argument("--batch-size", type=int, default=4, help="questions per forward pass")
    add_device_argument(parser)
    parser.add_argument(
        "--predictions",
        type=Path,
        default=None,
        help='write HotpotQA\'s prediction file, {"answer": {_id: text}, "sp": {_id: [[title, sent_id], ...]}}, '
        "here (as hotpot_evaluate_v1.py reads it; needed on a split without labels)",
    )
    parser.add_argument(
        "--write-evidence",
        type=Path,
        default=None,
        help="write {id: [title, ...]}, each question's --evidence-paragraphs best-scored paragraphs, here",
    )
    parser.add_argument(
        "--evidence-paragraphs", type=int, default=2, help="paragraphs per question in --write-evidence"
    )
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def main(args: argparse.Namespace) -> int:
    for name in ("max_answer_tokens", "sp_paragraphs", "evidence_paragraphs", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: {value}; give at least 1")
    manifest = read_manifest(args.data)  # before the model runs: a directory prep did not finish fails here
    if manifest is None or manifest.get("kind") != KIND:
        raise ValueError(f"--data: {args.data} has no {MANIFEST} of a finished `longformer-fs prep {KIND}` run")
    model, task = load_model(args.checkpoint, args.data, args.device)
    if getattr(task, "prep", None) != KIND:
        raise ValueError(f"{args.checkpoint}: trained with task {type(task).__name__}, not longformer_hotpotqa")
    labelled = prediction_dataset(task, args.split).labelled
    if not labelled and args.predictions is None and args.write_evidence is None:
        raise ValueError(
            f"--split {args.split}: {args.data} holds it without answers or supporting facts (a test file), so it "
            "cannot be scored; give --predictions FILE to write its predictions"
        )
    predictions = predict_hotpotqa(
        model, task, args.split, args.max_answer_tokens, args.sp_paragraphs, args.batch_size, args.device
    )
    if args.predictions:
        output.write_text(args.predictions, json.dumps(prediction_file(predictions), indent=1, ensure_ascii=False))
    if args.write_evidence:
        evidence = evidence_file(predictions, args.evidence_paragraphs)
        output.write_text(args.write_evidence, json.dumps(evidence, indent=1, ensure_ascii=False))
    if not labelled:
        written = ", ".join(str(path) for path in (args.predictions, args.write_evidence) if path)
        if args.json:
            print(json.dumps({"count": len(predictions), "scored": False}, indent=2))
        else:
            print(f"{args.split}: {len(predictions)} questions, not scored (prepared without labels); wrote {written}")
        return 0
    scores = score_split(task, args.split, predictions)
    if args.json:
        print(json.dumps(scores, indent=2))
        return 0
    print(f"{args.split}: {scores['count']} questions, scored by HotpotQA's official rules (SQuAD normalisation)")
    for label, prefix in (("answer", ""), ("supporting facts", "sp_"), ("joint", "joint_")):
        print(
            f"  {label:<17} EM {scores[prefix + 'em']:6.2f}  F1 {scores[prefix + 'f1']:6.2f}  "
            f"P {scores[prefix + 'prec']:6.2f}  R {scores[prefix + 'recall']:6.2f}"
        )
    return 0
