"""fairseq's beam search in numpy, for decoders that run outside torch.

The rules are ``fairseq.sequence_generator.SequenceGenerator``'s for one source, so that
an exported LED summarizes as ``longformer-fs summarize`` does, token for token:

- the search starts from ``</s>``; at step 0 only the first beam's row is read;
- ``2 * beam`` candidates a step (the top of every beam's extensions); those ending in
  ``</s>`` among the first ``beam`` are finished, scored by their summed log-probability
  divided by ``length ** lenpen`` (the length counts the final ``</s>``); the search ends
  when ``beam`` hypotheses are finished, or at ``max_len``, where ``</s>`` is forced;
- ``</s>`` is barred before ``min_len`` tokens, ``<pad>`` always, and any token that
  would repeat an n-gram of ``no_repeat_ngram_size`` (the starting ``</s>`` counts);
- the best finished hypothesis wins (the first of equal scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class GenerationSettings:
    """Beam search settings; the defaults are the ones people use with LED.

    Attributes:
        beam: beam size.
        lenpen: length penalty (> 1 favours longer summaries).
        no_repeat_ngram_size: no n-gram of this size twice in a summary (0: off).
        min_len, max_len: summary length in tokens.
    """

    beam: int = 4
    lenpen: float = 2.0
    no_repeat_ngram_size: int = 3
    min_len: int = 20
    max_len: int = 512

    def check(self) -> None:
        if self.beam < 1 or self.min_len < 0 or self.max_len < max(1, self.min_len) or self.no_repeat_ngram_size < 0:
            raise ValueError(
                f"generation: need beam >= 1, 0 <= min_len <= max_len, max_len >= 1, "
                f"no_repeat_ngram_size >= 0; got {self}"
            )


# step(last_tokens, order) -> logits: last_tokens int64 (beam, 1), the token each row ends
# in; order int64 (beam,), the rows of the previous step each row continues (None at step
# 0): the decoder reorders its caches by it first. logits: float (beam, vocab).
Step = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float32 log-probabilities over the last axis, as ``torch.log_softmax`` in float32."""
    x = logits.astype(np.float32)
    top = x.max(axis=-1, keepdims=True)
    return (x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))).astype(np.float32)


def _block_repeats(lprobs: np.ndarray, tokens: np.ndarray, step: int, n: int) -> None:
    """Bar, in each row, every token that would end an n-gram already in ``tokens[:, :step + 1]``."""
    if n <= 0 or step + 2 - n < 0:
        return
    for row, history in enumerate(tokens[:, : step + 1].tolist()):
        prefix = tuple(history[step + 2 - n :]) if n > 1 else ()
        banned = [history[i + n - 1] for i in range(len(history) - n + 1) if tuple(history[i : i + n - 1]) == prefix]
        if banned:
            lprobs[row, banned] = -np.inf


def beam_search(step: Step, settings: GenerationSettings, eos: int, pad: int, max_len: int) -> list[int]:
    """The best hypothesis for one source, token ids without the final ``</s>``.

    Args:
        step: the decoder (:data:`Step`), its caches holding ``settings.beam`` rows of one source.
        max_len: the most tokens a hypothesis may have before its ``</s>`` (already the
            lesser of ``settings.max_len`` and the decoder's positions).
    """
    beam = settings.beam
    tokens = np.full((beam, max_len + 2), pad, dtype=np.int64)
    tokens[:, 0] = eos
    scores = np.zeros((beam, max_len + 1), dtype=np.float32)
    finished: list[tuple[float, list[int]]] = []
    ignore = np.zeros(beam, dtype=bool)  # rows left holding a finished candidate
    order = None
    for t in range(max_len + 1):
        lprobs = log_softmax(step(tokens[:, t : t + 1], order))
        lprobs[np.isnan(lprobs)] = -np.inf
        lprobs[:, pad] = -np.inf
        if t >= max_len:
            keep = lprobs[:, eos].copy()
            lprobs[:] = -np.inf
            lprobs[:, eos] = keep
        elif t < settings.min_len:
            lprobs[:, eos] = -np.inf
        _block_repeats(lprobs, tokens, t, settings.no_repeat_ngram_size)
        vocab = lprobs.shape[1]
        extended = lprobs[:1] if t == 0 else lprobs + scores[:, t - 1 : t]
        flat = extended.reshape(-1)
        k = min(2 * beam, flat.size - 1)
        top = np.argsort(-flat, kind="stable")[:k]  # the first of equal scores first
        cand_scores, cand_beams, cand_tokens = flat[top], top // vocab, top % vocab
        ends = (cand_tokens == eos) & (cand_scores != -np.inf)
        ends[:beam][ignore[: min(beam, k)]] = False
        for i in np.flatnonzero(ends[:beam]):
            if len(finished) < beam:
                hypothesis = tokens[cand_beams[i], 1 : t + 1].tolist()
                finished.append((float(cand_scores[i] / (t + 1) ** settings.lenpen), hypothesis))
        if ends[:beam].any() and (len(finished) == beam or t == max_len):
            break
        # The next rows: the best candidates that do not end, then (when fewer than beam
        # remain) ending ones, which are ignored from then on.
        ends[: min(beam, k)] |= ignore[: min(beam, k)]
        rank = ends * (2 * beam) + np.arange(k)
        active = np.argsort(rank, kind="stable")[:beam]
        ignore = rank[active] >= 2 * beam
        order = cand_beams[active]
        tokens[:, : t + 1] = tokens[order, : t + 1]
        tokens[:, t + 1] = cand_tokens[active]
        if t > 0:
            scores[:, :t] = scores[order, :t]
        scores[:, t] = cand_scores[active]
    finished.sort(key=lambda hypothesis: -hypothesis[0])  # stable: the first of equal scores wins
    return finished[0][1]
