"""HotpotQA's official metrics (``hotpot_evaluate_v1.py``, Yang et al. 2018): answer,
supporting facts, and both jointly.

Each example is scored on three things, each with exact match (EM), precision, recall
and F1, all in [0, 1]:

- **Answer.** The predicted and gold answer strings are normalised as SQuAD's script
  does (:data:`~longformer_fs.conventions.NORMALIZATIONS` ``["hotpotqa"]``: lower case,
  ASCII punctuation *deleted*, the articles a/an/the dropped, white space collapsed).
  EM: the normalised strings are equal. F1: over the normalised words, with two rules of
  HotpotQA's own:

  - when either normalised string is ``yes``, ``no`` or ``noanswer`` and the two differ,
    precision, recall and F1 are 0 (a comparison question's answer is right or wrong,
    with no partial credit for sharing a word);
  - when no word is shared, they are 0; so two answers that both normalise to nothing
    have EM 1 but F1 0 (SQuAD 2.0's script would give F1 1).
- **Supporting facts.** The predicted and gold sets of ``(title, sentence index)`` pairs
  (a pair repeated counts once). Precision = |shared|/|predicted|, recall =
  |shared|/|gold|, each 0 over an empty set; EM: the sets are equal.
- **Joint.** Joint precision = answer precision × supporting-fact precision, joint
  recall likewise, joint F1 their harmonic mean, joint EM = answer EM × supporting-fact EM.

A corpus score is the mean over the gold examples. An example without a predicted
answer scores 0 on the answer metrics, one without predicted supporting facts 0 on
those, and either scores 0 jointly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..conventions import NORMALIZATIONS

__all__ = ["METRIC_NAMES", "Match", "answer_match", "hotpotqa_scores", "joint_match", "supporting_facts_match"]

NORMALIZATION = NORMALIZATIONS["hotpotqa"]

# Normalised answers that get no partial credit (hotpot_evaluate_v1.py's f1_score).
CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})

# The official script's metric names, in its order: answer, supporting facts, joint.
METRIC_NAMES = tuple(f"{prefix}{name}" for prefix in ("", "sp_", "joint_") for name in ("em", "f1", "prec", "recall"))


def _harmonic_mean(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


@dataclass(frozen=True)
class Match:
    """One example's score on one of the three, each field in [0, 1].

    Attributes:
        em: exact match, 0 or 1.
        f1: the harmonic mean of ``precision`` and ``recall`` (0 when both are 0).
        precision, recall: of the prediction against the gold.
    """

    em: float
    f1: float
    precision: float
    recall: float


NO_MATCH = Match(0.0, 0.0, 0.0, 0.0)


def answer_match(prediction: str, gold: str) -> Match:
    """The predicted answer string against the gold one, by the official rules (module docstring)."""
    predicted, expected = NORMALIZATION.normalize(prediction), NORMALIZATION.normalize(gold)
    em = float(predicted == expected)
    if predicted != expected and (predicted in CLOSED_ANSWERS or expected in CLOSED_ANSWERS):
        return Match(em, 0.0, 0.0, 0.0)
    predicted_words, expected_words = predicted.split(), expected.split()
    shared = sum((Counter(predicted_words) & Counter(expected_words)).values())
    if shared == 0:
        return Match(em, 0.0, 0.0, 0.0)
    precision, recall = shared / len(predicted_words), shared / len(expected_words)
    return Match(em, _harmonic_mean(precision, recall), precision, recall)


def supporting_facts_match(prediction: Iterable[Sequence], gold: Iterable[Sequence]) -> Match:
    """Predicted supporting facts against the gold ones.

    Args:
        prediction, gold: ``[title, sentence index]`` pairs (lists or tuples, as the JSON
            files hold them). Pairs compare as given: ``["T", 0]`` and ``["T", "0"]`` differ.
    """
    predicted, expected = set(map(tuple, prediction)), set(map(tuple, gold))
    shared = len(predicted & expected)
    precision = shared / len(predicted) if predicted else 0.0
    recall = shared / len(expected) if expected else 0.0
    return Match(float(predicted == expected), _harmonic_mean(precision, recall), precision, recall)


def joint_match(answer: Match, supporting_facts: Match) -> Match:
    """The joint score: precision and recall the products of the two's, EM both exact."""
    precision = answer.precision * supporting_facts.precision
    recall = answer.recall * supporting_facts.recall
    return Match(answer.em * supporting_facts.em, _harmonic_mean(precision, recall), precision, recall)


def hotpotqa_scores(predictions: Mapping, examples: Iterable[Mapping]) -> dict:
    """The official metrics over ``examples``, in percent.

    Args:
        predictions: HotpotQA's prediction format, ``{"answer": {id: answer text},
            "sp": {id: [[title, sentence index], ...]}}``; either part may lack ids, and
            ids of no example are ignored.
        examples: the gold records, each with ``"_id"``, ``"answer"`` and
            ``"supporting_facts"`` (HotpotQA's JSON).

    Returns:
        The official script's twelve means (:data:`METRIC_NAMES`: ``em``, ``f1``,
        ``prec``, ``recall``, then ``sp_`` and ``joint_`` of each), x100, over all the
        examples (0 for a metric of an example its prediction lacks); ``"count"``
        (examples), ``"missing_answer"`` and ``"missing_sp"`` (examples without a
        predicted answer, without predicted supporting facts).
    """
    answers, facts = predictions.get("answer", {}), predictions.get("sp", {})
    totals = dict.fromkeys(METRIC_NAMES, 0.0)
    count = missing_answer = missing_sp = 0
    for example in examples:
        count += 1
        example_id = example["_id"]
        answer = sp = None
        if example_id in answers:
            answer = answer_match(answers[example_id], example["answer"])
        else:
            missing_answer += 1
        if example_id in facts:
            sp = supporting_facts_match(facts[example_id], example["supporting_facts"])
        else:
            missing_sp += 1
        joint = joint_match(answer, sp) if answer is not None and sp is not None else NO_MATCH
        for prefix, part in (("", answer), ("sp_", sp), ("joint_", joint)):
            part = part if part is not None else NO_MATCH  # a missing prediction scores 0
            totals[f"{prefix}em"] += part.em
            totals[f"{prefix}f1"] += part.f1
            totals[f"{prefix}prec"] += part.precision
            totals[f"{prefix}recall"] += part.recall
    scale = 100.0 / count if count else 0.0
    scores = {name: total * scale for name, total in totals.items()}
    return {**scores, "count": count, "missing_answer": missing_answer, "missing_sp": missing_sp}
