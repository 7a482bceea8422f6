"""Exact match and token F1 of extractive QA, as TriviaQA and SQuAD report them.

Answers are compared after :func:`normalize_answer`: lower case, punctuation (and so
underscores) turned into spaces, the articles a/an/the removed, white space collapsed.
This is TriviaQA's normalisation, the one the paper's TriviaQA numbers use. SQuAD's
script deletes punctuation instead ("don't" -> "dont", here "don t"), so a SQuAD score
from here can differ from the official script's in the rare answers that split a word
at punctuation. The normalisation is defined in :mod:`data_prep.qa`, whose distant
supervision must call equal exactly what these metrics do.

A prediction is scored against every gold alias and keeps the best. An example with no
alias (an unanswerable SQuAD 2.0 question) has the empty answer as its one alias.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

from data_prep.qa import normalize_answer, normalized_words

__all__ = ["normalize_answer", "exact_match", "f1_score", "qa_scores"]


def _golds(aliases: Sequence[str] | str) -> list[str]:
    if isinstance(aliases, str):
        return [aliases]
    return list(aliases) or [""]


def _token_f1(prediction: list[str], gold: list[str]) -> float:
    if not prediction or not gold:
        return float(prediction == gold)  # both empty: a match; one empty: nothing in common
    common = sum((Counter(prediction) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(prediction), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, aliases: Sequence[str] | str) -> float:
    """1.0 when the normalised prediction equals some normalised alias, else 0.0."""
    normalized = normalize_answer(prediction)
    return float(any(normalized == normalize_answer(alias) for alias in _golds(aliases)))


def f1_score(prediction: str, aliases: Sequence[str] | str) -> float:
    """The best token-level F1 (in [0, 1]) of the prediction's words against any alias's."""
    words = [w for w, _, _ in normalized_words(prediction)]
    return max(_token_f1(words, [w for w, _, _ in normalized_words(alias)]) for alias in _golds(aliases))


def qa_scores(predictions: Mapping[str, str], examples: Iterable[Mapping]) -> dict:
    """Mean exact match and F1 over ``examples``, in percent.

    Args:
        predictions: example id -> predicted answer text; ids of no example are ignored.
        examples: dicts with ``"id"`` and ``"answers"`` (the lines of ``prep qa``'s
            ``{split}.examples.jsonl``).

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
        em += exact_match(prediction, example["answers"])
        f1 += f1_score(prediction, example["answers"])
    scale = 100.0 / count if count else 0.0
    return {"exact_match": em * scale, "f1": f1 * scale, "count": count, "missing": missing}
