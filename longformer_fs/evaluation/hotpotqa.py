"""HotpotQA predictions of a ``longformer_hotpotqa`` checkpoint over a ``prep hotpotqa`` split.

Each question runs once, whole (question, ``[p]`` and ``[s]`` global, as in training).
Its answer is "yes" or "no" when the type head says so, else the best span of at most
``max_answer_tokens`` over the sentence tokens (:func:`~.qa_spans.best_span_over_windows`
with one window), cut from the original sentence text through the prepared character
offsets. Its supporting facts are the sentences whose scorer logit is positive
(probability > 0.5) within the ``sp_paragraphs`` best-scored paragraphs (2: a distractor
question has two gold paragraphs), or the best such sentence when none is. The evidence
of the two-stage variant is each question's ``evidence_paragraphs`` best-scored titles.

Any split can be predicted; only one prepared with labels can be scored (HotpotQA's test
set has no answers: its predictions go to the official server, in :func:`prediction_file`'s
format).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .batches import batches, listed_split
from .hotpotqa_metrics import hotpotqa_scores
from .qa_spans import best_span_over_windows

ANSWER_OF_TYPE = {1: "yes", 2: "no"}


@dataclass(frozen=True)
class QuestionPrediction:
    """One question's prediction: the answer text, ``[[title, sentence index], ...]`` and
    its paragraphs' titles, best-scored first."""

    answer: str
    supporting_facts: list
    ranked_titles: list


def decide(example: dict, logits: tuple, offsets: np.ndarray, max_answer_tokens: int, sp_paragraphs: int):
    """One question's :class:`QuestionPrediction` from its logits (numpy, its own tokens only).

    Args:
        example: its ``{split}.examples.jsonl`` row (titles, sentence counts, context).
        logits: span ``(n, 2)``, type ``(3,)``, paragraph and sentence logits at its
            ``[p]`` and ``[s]`` tokens, in order.
        offsets: ``(n, 2)`` context characters per token.
    """
    span, qtype, paragraphs, sentences = logits
    kind = int(np.argmax(qtype))
    if kind in ANSWER_OF_TYPE:
        answer = ANSWER_OF_TYPE[kind]
    else:
        best = best_span_over_windows([span[:, 0]], [span[:, 1]], [offsets], example["context"], max_answer_tokens)
        answer = best.text if best is not None else ""
    order = [int(k) for k in np.argsort(-paragraphs, kind="stable")]
    titles, counts = example["titles"], example["sentence_counts"]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    chosen = []  # (logit, title, index) of each sentence in the best paragraphs
    for k in order[:sp_paragraphs]:
        chosen += [(sentences[first[k] + i], titles[k], i) for i in range(counts[k])]
    facts = [[title, i] for logit, title, i in chosen if logit > 0]
    if not facts and chosen:
        _, title, i = max(chosen, key=lambda c: c[0])
        facts = [[title, i]]
    return QuestionPrediction(answer, facts, [titles[k] for k in order])


def prediction_dataset(task, split: str):
    """``split``'s dataset, loaded when it is not yet, labelled or not (its ``labelled``
    says which)."""
    if split not in task.datasets:
        task.load_dataset(split, allow_unlabelled=True)
    return task.dataset(split)


def predict_hotpotqa(
    model,
    task,
    split: str,
    max_answer_tokens: int | None = None,
    sp_paragraphs: int = 2,
    batch_size: int = 4,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, QuestionPrediction]:
    """``_id`` -> its prediction, for every question of ``split`` (labelled or not), in file order."""
    prediction_dataset(task, split)
    dataset, examples = listed_split(task, split, "examples")
    max_answer_tokens = max_answer_tokens or task.cfg.max_answer_tokens
    predictions = {}
    for samples, batch in batches(dataset, batch_size, device, f"hotpotqa {split}", "question", progress):
        span, qtype, paragraphs, sentences = (x.cpu().numpy() for x in task.model_outputs(model, batch))
        for row, sample in enumerate(samples):
            n = len(sample["tokens"])
            logits = (
                span[row, :n],
                qtype[row],
                paragraphs[row][batch["paragraph_mask"][row].cpu().numpy()],
                sentences[row][batch["sentence_mask"][row].cpu().numpy()],
            )
            example = examples[sample["id"]]
            predictions[example["_id"]] = decide(
                example, logits, sample["offsets"].numpy(), max_answer_tokens, sp_paragraphs
            )
    return predictions


def prediction_file(predictions: dict[str, QuestionPrediction]) -> dict:
    """HotpotQA's prediction format: ``{"answer": {id: text}, "sp": {id: [[title, index], ...]}}``."""
    return {
        "answer": {k: p.answer for k, p in predictions.items()},
        "sp": {k: p.supporting_facts for k, p in predictions.items()},
    }


def evidence_file(predictions: dict[str, QuestionPrediction], paragraphs: int) -> dict:
    """The two-stage variant's evidence: ``{id: [title, ...]}``, each question's ``paragraphs`` best."""
    return {k: p.ranked_titles[:paragraphs] for k, p in predictions.items()}


def score_split(task, split: str, predictions: dict[str, QuestionPrediction]) -> dict:
    """The official metrics (:func:`~.hotpotqa_metrics.hotpotqa_scores`) against the split's gold records.

    Raises:
        ValueError: the split was prepared without labels.
    """
    if not prediction_dataset(task, split).labelled:
        raise ValueError(f"{split}: prepared without answers or supporting facts; there is no gold to score against")
    return hotpotqa_scores(prediction_file(predictions), task.examples(split))
