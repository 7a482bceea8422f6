"""Bits per character with the paper's overlapping-window protocol.

The split is one stream of N characters. A start symbol (fairseq's ``</s>``) precedes
it, so every character, the first included, is predicted from what comes before it.
Window k holds the inputs ending at ``end_k = min(window + k * step, N)`` (at most
``window`` of them) and scores only the targets after the previous window's end: the
first window scores everything it covers, each later one its last ``step`` characters.
So every character is scored exactly once, with at least ``window - step`` characters
of context once the stream is long enough (paper: window 32,256, step 512).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch


@dataclass(frozen=True)
class Window:
    start: int  # first input position (in the stream with the start symbol at 0)
    end: int  # one past the last input position
    scored_from: int  # targets [scored_from, end) are scored; target p is character p

    @property
    def length(self) -> int:
        return self.end - self.start


def window_plan(num_chars: int, window: int, step: int) -> list[Window]:
    """Windows that score each of ``num_chars`` characters exactly once."""
    if window < 1 or not 1 <= step <= window:
        raise ValueError(f"window/step: need window >= 1 and 1 <= step <= window, got {window}/{step}")
    plan, done = [], 0
    while done < num_chars:
        end = min(window + len(plan) * step, num_chars)
        plan.append(Window(max(0, end - window), end, done))
        done = end
    return plan


@dataclass
class BpcResult:
    bits: float
    scored: int
    windows: int

    @property
    def bpc(self) -> float:
        return self.bits / self.scored if self.scored else float("nan")


def sliding_window_bpc(
    log_probs: Callable[[torch.Tensor], torch.Tensor],
    chars: torch.Tensor,
    start_symbol: int,
    window: int,
    step: int,
    batch_size: int = 8,
    progress: Callable[[Iterator], Iterator] = lambda it: it,
) -> BpcResult:
    """Score ``chars`` (1-D token ids) with a language model.

    Args:
        log_probs: ``(B, L)`` input ids -> ``(B, L, V)`` log-probabilities of the next id.
        chars: the split, ``(N,)``.
        start_symbol: id that precedes the first character.
        window, step: the protocol's window length and step, in characters.
    """
    stream = torch.cat([chars.new_tensor([start_symbol]), chars])  # inputs; targets are stream[1:]
    plan = window_plan(len(chars), window, step)
    total, scored = 0.0, 0
    batches = [plan[i : i + batch_size] for i in range(0, len(plan), batch_size)]
    for batch in progress(iter(batches)):
        # Windows of one batch share a length except possibly the first (shorter) one.
        for length in sorted({w.length for w in batch}):
            group = [w for w in batch if w.length == length]
            inputs = torch.stack([stream[w.start : w.end] for w in group])
            targets = torch.stack([stream[w.start + 1 : w.end + 1] for w in group])
            lp = log_probs(inputs)
            lp = lp.to(torch.promote_types(lp.dtype, torch.float32))  # half -> fp32, fp64 stays
            lp = lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (b, L)
            for row, w in zip(lp, group, strict=True):
                kept = row[w.scored_from - w.start :]
                total -= float(kept.sum()) / math.log(2)
                scored += kept.numel()
    return BpcResult(total, scored, len(plan))
