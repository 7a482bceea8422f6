"""ROUGE as summarization papers report it (Google's ``rouge-score``).

ROUGE-1, ROUGE-2 and ROUGE-Lsum, each precision, recall and F1 scaled to 0-100,
computed per document with the Porter stemmer and averaged over documents. ROUGE-Lsum
is the summary-level longest common subsequence: it matches each reference sentence
against the hypothesis' sentences, which it finds at newlines, so every summary must
hold one sentence per line ("First sentence.\\nSecond one."). A summary on one line is
one sentence, and its ROUGE-Lsum is plain ROUGE-L.

rouge-score's tokenizer lowercases and keeps only ``[a-z0-9]`` runs: words in other
scripts score nothing.

Summaries are read from (:func:`read_summaries`):

- ``.jsonl``: one JSON object per line; the named field holds the summary, a string with
  sentences separated by newlines (as ``prep summarization`` writes references) or a
  list of sentences; blank lines are ignored;
- any other file: plain text, one summary per line (an empty line is an empty summary),
  split into sentences by :func:`longformer_fs.conventions.split_sentences`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..conventions import jsonl_records, split_sentences

METRICS = ("rouge1", "rouge2", "rougeLsum")
NAMES = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeLsum": "ROUGE-Lsum"}


@dataclass(frozen=True)
class Summary:
    """One summary as read from a file.

    Attributes:
        text: sentences separated by newlines.
        id: the record's ``id`` field (JSONL only), for checking that two files align.
        origin: ``file:line``, for messages.
    """

    text: str
    id: str | None
    origin: str


def _check_counts(hypotheses: int, references: int) -> None:
    if hypotheses != references:
        raise ValueError(f"rouge: {hypotheses} hypotheses but {references} references; need one per document")


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Mean ROUGE of ``hypotheses`` against ``references``, pairwise.

    Args:
        hypotheses, references: one summary per document, sentences separated by newlines.

    Returns:
        ``{"rouge1": {"precision": p, "recall": r, "f1": f}, "rouge2": {...},
        "rougeLsum": {...}, "documents": n}``; p, r, f are means over documents, x100.

    Raises:
        ValueError: the counts differ, or there is no document.
    """
    from rouge_score import rouge_scorer  # imports nltk: a second that only scoring should pay

    _check_counts(len(hypotheses), len(references))
    if not hypotheses:
        raise ValueError("rouge: no documents to score")
    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
    totals = {m: [0.0, 0.0, 0.0] for m in METRICS}
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        scores = scorer.score(reference, hypothesis)  # (target, prediction)
        for metric in METRICS:
            score = scores[metric]
            for i, value in enumerate((score.precision, score.recall, score.fmeasure)):
                totals[metric][i] += value
    n = len(hypotheses)
    result: dict = {
        m: {key: 100 * value / n for key, value in zip(("precision", "recall", "f1"), totals[m], strict=True)}
        for m in METRICS
    }
    result["documents"] = n
    return result


def read_summaries(path: Path, field: str, field_option: str = "field") -> list[Summary]:
    """The summaries in ``path`` (a ``.jsonl`` file's ``field``, or one per line of text).

    ``field_option`` names the option that chooses the field, for the error message.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a JSONL line that is not an object with ``field`` as a string or a
            list of strings (the message names the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found")
    if path.suffix != ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return [
            Summary("\n".join(split_sentences(line)), None, f"{path}:{number}") for number, line in enumerate(lines, 1)
        ]
    summaries = []
    for origin, record, problem in jsonl_records(path):
        if problem:
            raise ValueError(f"{origin}: {problem}")
        value = record.get(field) if isinstance(record, dict) else None
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
            raise ValueError(
                f"{origin}: no field {field!r} holding a string or a list of strings (has: {keys}); "
                f"name the field with --{field_option}"
            )
        record_id = record.get("id")
        summaries.append(Summary(value, None if record_id is None else str(record_id), origin))
    return summaries


def check_aligned(hypotheses: Sequence[Summary], references: Sequence[Summary]) -> None:
    """Raise ValueError unless both lists have one summary per document, in the same order.

    The order is checked where both summaries of a pair carry an ``id``.
    """
    _check_counts(len(hypotheses), len(references))
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        if hypothesis.id is not None and reference.id is not None and hypothesis.id != reference.id:
            raise ValueError(
                f"rouge: {hypothesis.origin} has id {hypothesis.id!r} but {reference.origin} has id "
                f"{reference.id!r}; the files must list the same documents in the same order"
            )


def format_scores(scores: dict, verbose: bool = False) -> str:
    """The scores (:func:`rouge_scores`) as a table: F1 per metric; precision and recall too when ``verbose``."""
    if not verbose:
        return "\n".join(f"{NAMES[m]:<11}{scores[m]['f1']:6.2f}" for m in METRICS)
    lines = [f"{'':<11}{'P':>7}{'R':>7}{'F1':>7}"]
    for m in METRICS:
        lines.append(f"{NAMES[m]:<11}" + "".join(f"{scores[m][key]:7.2f}" for key in ("precision", "recall", "f1")))
    return "\n".join(lines)
