"""Answers of a ``longformer_qa`` checkpoint over a ``prep qa`` split, and their scores.

Every window of an example is read by the model (question global, as in training); the
example's answer is the best span over its windows (:mod:`.qa_spans`), cut from the
original context through the window's character offsets, so the prediction is the text
as written, never a detokenised guess. Answers are compared by the official convention of
the dataset the split was prepared from, as its manifest records it. TriviaQA (Wikipedia
setting) is also scored per question: a question's answer is the best-scoring one over
its entity pages, whose example ids are ``"<QuestionId>--<page>"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from ..tasks.question_answering import QA_HEAD
from .checkpoint import batches
from .qa_metrics import NORMALIZATIONS, qa_scores
from .qa_spans import SpanPrediction, best_span_over_windows

TRIVIAQA_PAGE_SEPARATOR = "--"


@dataclass(frozen=True)
class WindowLogits:
    """The start and end logits of one window's tokens, float32 ``(n,)`` each."""

    index: int
    start: np.ndarray
    end: np.ndarray


def window_logits(
    model, task, split: str, batch_size: int = 8, device: str | torch.device = "cpu", progress: bool = True
) -> Iterator[WindowLogits]:
    """Every window of ``split`` through the model, in file order, ``batch_size`` at a time."""
    dataset = task.dataset(split)
    for samples, batch in batches(dataset, batch_size, device, f"qa {split}", "window", progress):
        features, _ = model(**batch["net_input"], features_only=True)
        logits = model.token_logits(QA_HEAD, features).float().cpu().numpy()
        for row, sample in enumerate(samples):
            n = dataset.num_tokens(sample["id"])
            yield WindowLogits(sample["id"], logits[row, :n, 0], logits[row, :n, 1])


def predict_answers(
    model,
    task,
    split: str,
    max_answer_tokens: int | None = None,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, SpanPrediction | None]:
    """Example id -> its best span over its windows (None when no window holds document text).

    ``prep qa`` writes an example's windows one after another, so each example is
    decided as soon as its last window is read.
    """
    if split not in task.datasets:
        task.load_dataset(split)
    max_answer_tokens = max_answer_tokens or task.cfg.max_answer_tokens
    windows, examples, offsets = task.windows(split), task.examples(split), task.offsets(split)
    if not len(windows) == len(offsets) == len(task.dataset(split)):
        raise ValueError(
            f"{split}: {len(windows)} windows listed, {len(offsets)} offsets, {len(task.dataset(split))} token "
            "windows; the split is incomplete, prepare it again"
        )
    contexts = {example["id"]: example["context"] for example in examples}
    predictions: dict[str, SpanPrediction | None] = {}
    pending: list[WindowLogits] = []

    def decide() -> None:
        example = windows[pending[0].index]["id"]
        predictions[example] = best_span_over_windows(
            [w.start for w in pending],
            [w.end for w in pending],
            [offsets[w.index].numpy() for w in pending],
            contexts[example],
            max_answer_tokens,
        )
        pending.clear()

    for item in window_logits(model, task, split, batch_size, device, progress):
        if pending and windows[item.index]["id"] != windows[pending[0].index]["id"]:
            decide()
        pending.append(item)
    if pending:
        decide()
    return predictions


def best_per_question(predictions: dict[str, SpanPrediction | None]) -> dict[str, SpanPrediction | None]:
    """TriviaQA: ``"<QuestionId>--<page>"`` predictions -> the best-scoring one per question."""
    best: dict[str, SpanPrediction | None] = {}
    for example, prediction in predictions.items():
        question = example.split(TRIVIAQA_PAGE_SEPARATOR, 1)[0]
        current = best.get(question)
        if current is None or (prediction is not None and prediction.score > current.score):
            best[question] = prediction
    return best


def score_split(task, split: str, predictions: dict[str, SpanPrediction | None], data_format: str) -> dict:
    """Exact match and F1 (percent) over every example of the split, and per question for
    TriviaQA; ``"normalization"`` names the convention used, ``data_format``'s
    (:func:`data_prep.qa.prepared_format`). An example with no prediction scores 0, as do
    unanswerable ones."""
    normalization = NORMALIZATIONS[data_format]
    examples = task.examples(split)
    texts = {k: (p.text if p is not None else "") for k, p in predictions.items()}
    scores = {"normalization": normalization.name, "examples": qa_scores(texts, examples, normalization)}
    if data_format == "triviaqa":
        questions = {}
        for example in examples:
            questions.setdefault(example["id"].split(TRIVIAQA_PAGE_SEPARATOR, 1)[0], example["answers"])
        per_question = best_per_question(predictions)
        texts = {k: (p.text if p is not None else "") for k, p in per_question.items()}
        answers = [{"id": q, "answers": a} for q, a in questions.items()]
        scores["questions"] = qa_scores(texts, answers, normalization)
    return scores
