"""``longformer-fs eval-qa``: exact match and F1 of a ``longformer_qa`` checkpoint on a ``prep qa`` split."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from data_prep.qa import prepared_format

from .. import output
from ..checkpoint import load_model
from ..conventions import MANIFEST
from ..evaluation.qa import (
    GROUPED_LEVEL,
    answer_texts,
    has_answers,
    official_level,
    official_predictions,
    predict_answers,
    score_split,
)
from ..evaluation.qa_metrics import NORMALIZATIONS
from ..serving.spans import OnnxSpanModel
from ..tasks.qa import QaConfig, QaTask
from .options import add_device_argument, add_evaluation_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run every window of a `prep qa` split through a longformer_qa checkpoint (question tokens global), take "
        "each example's best span over its windows (at most --max-answer-tokens long), cut it from the original "
        "context by the prepared character offsets, and score it as the official script of the dataset it was "
        "prepared from does (the format recorded by prep qa: SQuAD deletes punctuation, TriviaQA turns it into "
        "spaces). TriviaQA's Wikipedia domain is also scored per question (the best answer over the question's "
        "entity pages), the level its official script scores; its Web domain, like SQuAD, per example. Examples "
        "without a predicted answer, or without an answer in the text, score 0. A split prepared from a file "
        "without answers (TriviaQA's *-test-without-answers.json) is not scored: its answers are written to "
        "--official-predictions, the file to submit."
    )
    add_evaluation_arguments(
        parser,
        "a checkpoint fine-tuned with --task longformer_qa, or its export-onnx file (model.onnx, int8 files "
        "included), which then runs in onnxruntime on the CPU: the scores of the file you serve",
        "the `prep qa` directory",
    )
    parser.add_argument(
        "--max-answer-tokens", type=int, default=None, help="the longest answer (default: the task's, 30)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass")
    add_device_argument(parser, help="where a checkpoint runs (default: cuda when there is one); an .onnx file "
                        "always runs on the CPU")  # fmt: skip
    parser.add_argument(
        "--predictions",
        type=Path,
        default=None,
        help="write {example id: answer text} here (JSON), one answer per example: per (question, document) for "
        "TriviaQA, ids '<QuestionId>--<Filename>'",
    )
    parser.add_argument(
        "--official-predictions",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the prediction file the dataset's official evaluation reads (and TriviaQA's leaderboard "
        "takes), {key: answer text}: per QuestionId for TriviaQA's Wikipedia domain (the best answer over the "
        "question's pages), per '<QuestionId>--<Filename>' for its Web domain, per id for SQuAD (the same as "
        "--predictions); required for a split without answers",
    )
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def _write_json(path: Path, value: dict) -> None:
    output.write_text(path, json.dumps(value, indent=1, ensure_ascii=False))


def main(args: argparse.Namespace) -> int:
    if args.max_answer_tokens is not None and args.max_answer_tokens < 1:
        raise ValueError(f"--max-answer-tokens: {args.max_answer_tokens}; give at least 1")
    data_format = prepared_format(args.data)  # before the model runs: a directory prep qa did not finish fails here
    if args.checkpoint.suffix == ".onnx":
        # The file knows its own longest input, and says so in one line past it.
        model, task = (
            OnnxSpanModel(args.checkpoint),
            QaTask.setup_task(QaConfig(data=str(args.data), max_positions=sys.maxsize)),
        )
    else:
        model, task = load_model(args.checkpoint, args.data, args.device)
    if not hasattr(task, "windows"):
        raise ValueError(f"{args.checkpoint}: trained with task {type(task).__name__}, not longformer_qa")
    task.load_dataset(args.split)
    examples = task.examples(args.split)
    scored = has_answers(examples)
    if not scored and args.official_predictions is None:
        raise ValueError(
            f"{args.data}: split {args.split} has no answers to score against (prepared from a file released "
            "without them); give --official-predictions FILE to write the answers to submit"
        )
    predictions = predict_answers(model, task, args.split, args.max_answer_tokens, args.batch_size, args.device)
    if args.predictions:
        _write_json(args.predictions, answer_texts(predictions))
    official = official_predictions(predictions, examples, data_format)
    if args.official_predictions:
        _write_json(args.official_predictions, official)
    if not scored:
        level = official_level(examples, data_format)
        if args.json:
            unscored = {"normalization": NORMALIZATIONS[data_format].name, "official": level, "scored": False}
            print(json.dumps(unscored, indent=2))
        else:
            print(
                f"{args.split}: not scored, its examples come without answers; the answers to its {len(official)} "
                f"{level} are in {args.official_predictions}"
            )
        return 0
    scores = score_split(task, args.split, predictions, data_format)
    if args.json:
        print(json.dumps({**scores, "scored": True}, indent=2))
        return 0
    normalization = NORMALIZATIONS[scores["normalization"]]
    print(
        f"answers normalised by the official {normalization.name} convention ({normalization.description}): "
        f"{args.data / MANIFEST} records {data_format} data"
    )
    for level in ("examples", GROUPED_LEVEL):
        if level in scores:
            s = scores[level]
            mark = ", the official score" if level == scores["official"] else ""
            print(
                f"{args.split} ({level}): EM {s['exact_match']:.2f}  F1 {s['f1']:.2f}  over {s['count']} "
                f"{level} ({s['missing']} without a prediction){mark}"
            )
    return 0
