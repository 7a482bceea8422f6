"""Answer spans from a QA head's start and end logits.

:func:`best_span` picks the best ``(start, end)`` pair of one window; :func:`best_span_over_windows`
the best over every window of one example (the windows of ``prep qa``), mapped back to the
context's characters through the window's offsets. Scores are ``start_logit + end_logit``,
compared across windows as they are (as BERT's SQuAD recipe does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def _numpy(values) -> np.ndarray:
    """A float64 1-D copy of a tensor (any device) or array."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)


def best_span(start_logits, end_logits, max_answer_tokens: int, allowed) -> tuple[float, int, int]:
    """The highest ``start_logits[s] + end_logits[e]`` with ``s <= e < s + max_answer_tokens``.

    Both ends must be allowed positions. Ties go to the smallest start, then the
    smallest end. Cost O(n * max_answer_tokens), vectorised.

    Args:
        start_logits, end_logits: (n,) tensors or arrays.
        max_answer_tokens: the longest answer, in tokens (>= 1).
        allowed: (n,) bool, the positions an answer may start or end at (document tokens).

    Returns:
        ``(score, start, end)``, positions in the window, ``end`` inclusive.

    Raises:
        ValueError: shapes differ, ``max_answer_tokens < 1``, or no position is allowed.
    """
    start_logits, end_logits = _numpy(start_logits), _numpy(end_logits)
    allowed = np.asarray(allowed.cpu() if hasattr(allowed, "cpu") else allowed, dtype=bool).reshape(-1)
    n = len(start_logits)
    if len(end_logits) != n or len(allowed) != n:
        raise ValueError(f"best_span: lengths differ ({n} start, {len(end_logits)} end, {len(allowed)} allowed)")
    if max_answer_tokens < 1:
        raise ValueError(f"best_span: max_answer_tokens must be >= 1, got {max_answer_tokens}")
    if not allowed.any():
        raise ValueError("best_span: no position is allowed")
    width = min(max_answer_tokens, n)
    ends = np.where(allowed, end_logits, -np.inf)
    # candidates[s, d] = end logit at s + d (or -inf past the end): a strided view, no copy.
    candidates = np.lib.stride_tricks.sliding_window_view(np.concatenate([ends, np.full(width - 1, -np.inf)]), width)
    scores = np.where(allowed, start_logits, -np.inf)[:, None] + candidates
    flat = int(np.argmax(scores))  # row-major: the first maximum has the smallest start, then end
    start, offset = divmod(flat, width)
    return float(scores[start, offset]), start, start + offset


@dataclass(frozen=True)
class SpanPrediction:
    """The chosen answer of one example.

    Attributes:
        text: ``context[char_start:char_end]``.
        score: its start + end logit.
        window: the window it came from; ``start``/``end`` are token positions in it.
        char_start, char_end: its characters in the context, ``[start, end)``.
    """

    text: str
    score: float
    window: int
    start: int
    end: int
    char_start: int
    char_end: int


def best_span_over_windows(
    start_logits: Sequence,
    end_logits: Sequence,
    offsets: Sequence,
    context: str,
    max_answer_tokens: int,
) -> SpanPrediction | None:
    """The best span over all windows of one example, as context text.

    Args:
        start_logits, end_logits: per window, (>= n,) logits (padding past the window's
            n tokens is ignored).
        offsets: per window, its ``prep qa`` offsets item: 2n (or (n, 2)) context
            characters ``[start, end)`` per token, -1 for tokens outside the document.
            Only document tokens may start or end an answer.
        context: the example's original context text.
        max_answer_tokens: the longest answer, in tokens.

    Returns:
        The prediction, or None when no window holds a document token.
    """
    if not len(start_logits) == len(end_logits) == len(offsets):
        raise ValueError(
            f"best_span_over_windows: {len(start_logits)} start, {len(end_logits)} end and "
            f"{len(offsets)} offsets windows"
        )
    best = None
    for k, (starts, ends, window_offsets) in enumerate(zip(start_logits, end_logits, offsets, strict=True)):
        chars = np.asarray(window_offsets, dtype=np.int64).reshape(-1, 2)
        n = len(chars)
        starts, ends = _numpy(starts), _numpy(ends)
        if len(starts) < n or len(ends) < n:
            raise ValueError(f"best_span_over_windows: window {k} has {n} tokens but {len(starts)} logits")
        allowed = chars[:, 0] >= 0
        if not allowed.any():
            continue
        score, start, end = best_span(starts[:n], ends[:n], max_answer_tokens, allowed)
        if best is None or score > best.score:
            char_start, char_end = int(chars[start, 0]), int(chars[end, 1])
            best = SpanPrediction(context[char_start:char_end], score, k, start, end, char_start, char_end)
    return best
