"""Answers of a ``longformer_qa`` checkpoint over a ``prep qa`` split, and their scores.

Every window of an example is read by the model (question global, as in training); the
example's answer is the best span over its windows (:mod:`.qa_spans`), cut from the
original context through the window's character offsets, so the prediction is the text
as written, never a detokenised guess. Answers are compared by the official convention of
the dataset the split was prepared from, as its manifest records it.

The official evaluation answers one prediction per key, which ``prep qa`` records with
each example (``"key"`` in ``{split}.examples.jsonl``): TriviaQA's Wikipedia domain keys a
question by its ``QuestionId`` (its answer is the best-scoring one over its entity pages,
example ids ``"<QuestionId>--<Filename>"``), its Web domain and SQuAD key each example by
its id. :func:`official_predictions` is the file those scripts read; :func:`score_split`
scores the examples, and the keys as well where keys group examples (``"questions"``).
A split prepared from a file without answers (TriviaQA's ``*-test-without-answers.json``)
has ``"answers": null`` and cannot be scored, only predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch

from ..serving.spans import OnnxSpanModel
from .batches import batches
from .qa_metrics import NORMALIZATIONS, qa_scores
from .qa_spans import SpanPrediction, best_span_over_windows

TRIVIAQA_PAGE_SEPARATOR = "--"
# What a key that groups several examples stands for: TriviaQA's Wikipedia questions.
GROUPED_LEVEL = "questions"


@dataclass(frozen=True)
class WindowLogits:
    """The start and end logits of one window's tokens, float32 ``(n,)`` each."""

    index: int
    start: np.ndarray
    end: np.ndarray


def _batch_logits(model, task, batch: dict) -> np.ndarray:
    """``(B, T, 2)`` start and end logits of a batch, from a PyTorch model or an exported file."""
    if isinstance(model, OnnxSpanModel):
        tokens = batch["net_input"]["src_tokens"]
        masks = tokens != task.dictionary.pad(), batch["net_input"]["global_attention_mask"]
        return model.logits(tokens.cpu().numpy(), *(m.long().cpu().numpy() for m in masks))
    return task.model_outputs(model, batch).cpu().numpy()


def window_logits(
    model, task, split: str, batch_size: int = 8, device: str | torch.device = "cpu", progress: bool = True
) -> Iterator[WindowLogits]:
    """Every window of ``split`` through the model (a ``longformer_qa`` model, or its
    :class:`~longformer_fs.serving.spans.OnnxSpanModel`), in file order, ``batch_size`` at a time."""
    dataset = task.dataset(split)
    for samples, batch in batches(dataset, batch_size, device, f"qa {split}", "window", progress):
        logits = _batch_logits(model, task, batch)
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


def evaluation_key(example: Mapping, data_format: str) -> str:
    """The key the official evaluation answers ``example`` under, as ``prep qa`` recorded it.

    Splits prepared before keys were recorded are TriviaQA's Wikipedia domain, keyed by
    question (the id before ``"--"``), or SQuAD, keyed by id.
    """
    if "key" in example:
        return example["key"]
    if data_format == "triviaqa":
        return example["id"].split(TRIVIAQA_PAGE_SEPARATOR, 1)[0]
    return example["id"]


def evaluation_keys(examples: Sequence[Mapping], data_format: str) -> dict[str, str]:
    """Example id -> :func:`evaluation_key`, in the examples' order."""
    return {example["id"]: evaluation_key(example, data_format) for example in examples}


def best_per_key(
    predictions: Mapping[str, SpanPrediction | None], keys: Mapping[str, str]
) -> dict[str, SpanPrediction | None]:
    """Example id -> prediction, as key -> the best-scoring prediction of the key's
    examples (``keys``: example id -> key), None only when none of them has one.
    Predictions of examples not in ``keys`` are ignored."""
    best: dict[str, SpanPrediction | None] = {}
    for example, prediction in predictions.items():
        key = keys.get(example)
        if key is None:
            continue
        current = best.get(key)
        if current is None or (prediction is not None and prediction.score > current.score):
            best[key] = prediction
    return best


def answer_texts(predictions: Mapping[str, SpanPrediction | None]) -> dict[str, str]:
    """Each prediction's text, ``""`` where there is none (no window held document text)."""
    return {k: (p.text if p is not None else "") for k, p in predictions.items()}


def official_predictions(
    predictions: Mapping[str, SpanPrediction | None], examples: Sequence[Mapping], data_format: str
) -> dict[str, str]:
    """The prediction file of the dataset's official evaluation: ``{key: answer text}``
    over every key of ``examples`` (the split's ``examples.jsonl``), in their order; ``""``
    for a key without a predicted answer.

    TriviaQA's ``triviaqa_evaluation.py --prediction_file`` reads it (Wikipedia domain:
    per ``QuestionId``; Web: per ``"<QuestionId>--<Filename>"``), as SQuAD's ``evaluate``
    script does (per id).
    """
    keys = evaluation_keys(examples, data_format)
    best = best_per_key(predictions, keys)
    return {key: (best[key].text if best.get(key) is not None else "") for key in dict.fromkeys(keys.values())}


def has_answers(examples: Sequence[Mapping]) -> bool:
    """Whether any example of a split has gold answers to score against."""
    return any(example["answers"] is not None for example in examples)


def official_level(examples: Sequence[Mapping], data_format: str) -> str:
    """The level the official evaluation scores: :data:`GROUPED_LEVEL` where keys group
    examples (TriviaQA's Wikipedia questions), else ``"examples"``."""
    grouped = any(evaluation_key(example, data_format) != example["id"] for example in examples)
    return GROUPED_LEVEL if grouped else "examples"


def score_split(task, split: str, predictions: dict[str, SpanPrediction | None], data_format: str) -> dict:
    """Exact match and F1 (percent) over the examples of the split with answers, and over
    their keys where keys group examples (TriviaQA's Wikipedia domain: ``"questions"``).

    Returns:
        ``{"normalization", "official", "examples", ["questions"]}``: the convention used,
        ``data_format``'s (:func:`data_prep.qa.prepared_format`); the level the official
        script computes; and each level's :func:`~.qa_metrics.qa_scores`. An example with
        no prediction scores 0, as do unanswerable ones.
    """
    normalization = NORMALIZATIONS[data_format]
    examples = [example for example in task.examples(split) if example["answers"] is not None]
    level = official_level(examples, data_format)
    scores = {"normalization": normalization.name, "official": level}
    scores["examples"] = qa_scores(answer_texts(predictions), examples, normalization)
    if level == GROUPED_LEVEL:
        keys = evaluation_keys(examples, data_format)
        answers: dict[str, list[str]] = {}
        for example in examples:
            answers.setdefault(keys[example["id"]], example["answers"])
        texts = answer_texts(best_per_key(predictions, keys))
        scores[level] = qa_scores(texts, [{"id": k, "answers": a} for k, a in answers.items()], normalization)
    return scores
