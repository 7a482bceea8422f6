"""Exact match and token F1 of extractive QA, each dataset by its official script's convention.

Answers are compared after normalisation (:class:`~longformer_fs.conventions.AnswerNormalization`):
lower case, the articles a/an/the removed, white space collapsed, and punctuation
treated as the dataset's script treats it. SQuAD's (and HotpotQA's) deletes it, so
"1,000 km" equals "1000 km" and "U.S.A." equals "USA"; TriviaQA's turns it, and
underscores, into spaces, so "Los_Angeles" equals "Los Angeles" but "1,000" is "1 000".
:data:`~longformer_fs.conventions.NORMALIZATIONS` maps a dataset to its convention; the
conventions are shared with ``prep qa`` (:mod:`longformer_fs.conventions`), whose TriviaQA
distant supervision must call equal exactly what the metric does.

A prediction is scored against every gold alias and keeps the best. An example with no
alias (an unanswerable SQuAD 2.0 question) has the empty answer as its one alias.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

from ..conventions import NORMALIZATIONS, SQUAD, TRIVIAQA, AnswerNormalization

__all__ = ["NORMALIZATIONS", "SQUAD", "TRIVIAQA", "AnswerNormalization", "exact_match", "f1_score", "qa_scores"]


def _golds(aliases: Sequence[str] | str) -> list[str]:
    if isinstance(aliases, str):
        return [aliases]
    return list(aliases) or [""]


def _token_f1(prediction: list[str], gold: list[str], empty_f1: float) -> float:
    if not prediction and not gold:
        return empty_f1
    common = sum((Counter(prediction) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(prediction), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, aliases: Sequence[str] | str, normalization: AnswerNormalization) -> float:
    """1.0 when the normalised prediction equals some normalised alias, else 0.0."""
    normalized = normalization.normalize(prediction)
    return float(any(normalized == normalization.normalize(alias) for alias in _golds(aliases)))


def f1_score(prediction: str, aliases: Sequence[str] | str, normalization: AnswerNormalization) -> float:
    """The best token-level F1 (in [0, 1]) of the prediction's normalised words against any alias's."""

    def words(text: str) -> list[str]:
        return [word for word, _, _ in normalization.words(text)]

    predicted = words(prediction)
    return max(_token_f1(predicted, words(alias), normalization.empty_f1) for alias in _golds(aliases))


def qa_scores(predictions: Mapping[str, str], examples: Iterable[Mapping], normalization: AnswerNormalization) -> dict:
    """Mean exact match and F1 over ``examples``, in percent.

    Args:
        predictions: example id -> predicted answer text; ids of no example are ignored.
        examples: dicts with ``"id"`` and ``"answers"`` (the lines of ``prep qa``'s
            ``{split}.examples.jsonl``).
        normalization: the dataset's convention (``NORMALIZATIONS[format]``).

    Returns:
        ``{"exact_match", "f1"}`` (x100, a missing prediction scoring 0), ``"count"``
        (examples scored) and ``"missing"`` (examples without a prediction).
    """
    em = f1 = 0.0
    count = missing = 0
    for example in examples:
        count += 1
        prediction = predictions.get(example["id"])
        if prediction is None:
            missing += 1
            continue
        em += exact_match(prediction, example["answers"], normalization)
        f1 += f1_score(prediction, example["answers"], normalization)
    scale = 100.0 / count if count else 0.0
    return {"exact_match": em * scale, "f1": f1 * scale, "count": count, "missing": missing}
