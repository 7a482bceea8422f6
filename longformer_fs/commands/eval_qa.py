"""``longformer-fs eval-qa``: exact match and F1 of a ``longformer_qa`` checkpoint on a ``prep qa`` split."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.fairseq_dataset import MANIFEST
from data_prep.qa import prepared_format
from longformer_fs.evaluation.checkpoint import load_model
from longformer_fs.evaluation.qa import predict_answers, score_split
from longformer_fs.evaluation.qa_metrics import NORMALIZATIONS

from .options import add_device_argument, add_evaluation_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every window of a `prep qa` split through a longformer_qa checkpoint (question tokens global), take "
        "each example's best span over its windows (at most --max-answer-tokens long), cut it from the original "
        "context by the prepared character offsets, and score it as the official script of the dataset it was "
        "prepared from does (the format recorded by prep qa: SQuAD deletes punctuation, TriviaQA turns it into "
        "spaces). TriviaQA is also scored per question (the best answer over the question's entity pages, the "
        "official Wikipedia setting). Examples without a predicted answer, or without an answer in the text, score 0."
    )
    add_evaluation_arguments(parser, "a checkpoint fine-tuned with --task longformer_qa", "the `prep qa` directory")
    parser.add_argument(
        "--max-answer-tokens", type=int, default=None, help="the longest answer (default: the task's, 30)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass")
    add_device_argument(parser)
    parser.add_argument("--predictions", type=Path, default=None, help="write {id: answer text} here (JSON)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def main(args: argparse.Namespace) -> int:
    if args.max_answer_tokens is not None and args.max_answer_tokens < 1:
        raise ValueError(f"--max-answer-tokens: {args.max_answer_tokens}; give at least 1")
    data_format = prepared_format(args.data)  # before the model runs: a directory prep qa did not finish fails here
    model, task = load_model(args.checkpoint, args.data, args.device)
    if not hasattr(task, "windows"):
        raise ValueError(f"{args.checkpoint}: trained with task {type(task).__name__}, not longformer_qa")
    task.load_dataset(args.split)
    predictions = predict_answers(model, task, args.split, args.max_answer_tokens, args.batch_size, args.device)
    scores = score_split(task, args.split, predictions, data_format)
    if args.predictions:
        texts = {k: (p.text if p is not None else "") for k, p in predictions.items()}
        args.predictions.write_text(json.dumps(texts, indent=1, ensure_ascii=False), encoding="utf-8")
    if args.json:
        print(json.dumps(scores, indent=2))
        return 0
    normalization = NORMALIZATIONS[scores.pop("normalization")]
    print(
        f"answers normalised by the official {normalization.name} convention ({normalization.description}): "
        f"{args.data / MANIFEST} records {data_format} data"
    )
    for level, s in scores.items():
        print(
            f"{args.split} ({level}): EM {s['exact_match']:.2f}  F1 {s['f1']:.2f}  over {s['count']} "
            f"{level} ({s['missing']} without a prediction)"
        )
    return 0
