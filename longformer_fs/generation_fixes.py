"""A fix of fairseq's generation that changes results, applied where the plugin registers.

fairseq 0.12's ``NGramRepeatBlock`` without its CUDA extension (on CPU, and on GPUs where
the extension is not built, as in fairseq-fixed's wheels) compares the last ``n - 1``
entries of the whole token buffer, which past the current step hold padding, with the
n-grams generated so far: it never matches, and ``--no-repeat-ngram-size`` blocks nothing
(fairseq issue #5206). Summaries with ``summarize``'s "no repeated 3-gram" repeated
3-grams. The fix compares the ``n - 1`` tokens generated last, as the CUDA kernel and HF's
``no_repeat_ngram_size`` do: a token is banned where it would complete an n-gram the
hypothesis already holds (its first token, the decoder's start, included).
"""

from __future__ import annotations

import math

import torch
from fairseq.ngram_repeat_block import NGramRepeatBlock


def _no_repeat_ngram(self, tokens: torch.Tensor, lprobs: torch.Tensor, bsz: int, beam_size: int, step: int):
    """``lprobs`` (``(bsz * beam, vocab)``) with -inf where a token would repeat an n-gram of
    ``tokens[:, : step + 1]``, the hypotheses so far."""
    n = self.no_repeat_ngram_size
    if step + 2 < n:
        return lprobs
    for row, hypothesis in enumerate(tokens[:, : step + 1].cpu().tolist()):
        tail = hypothesis[len(hypothesis) - n + 1 :] if n > 1 else []
        banned = [hypothesis[i + n - 1] for i in range(len(hypothesis) - n + 1) if hypothesis[i : i + n - 1] == tail]
        if banned:
            lprobs[row, torch.tensor(banned, dtype=torch.long, device=lprobs.device)] = -math.inf
    return lprobs


def fix_ngram_blocking() -> None:
    NGramRepeatBlock._no_repeat_ngram = _no_repeat_ngram
