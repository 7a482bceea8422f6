"""Masked-LM loss in bits per masked token (the paper's "BPC" for Table 6).

Deterministic on purpose: the same positions are masked for every model compared, and
masked tokens are all replaced by ``<mask>`` (no BERT 80/10/10 noise), so differences
come from the models only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MaskedLmScore:
    bits: float  # mean cross-entropy over masked tokens, in bits
    masked: int  # number of masked tokens scored


def mask_positions(tokens: torch.Tensor, special: torch.Tensor, mask_prob: float, seed: int) -> torch.Tensor:
    """``(N, L)`` bool: each non-special token is masked with probability ``mask_prob``."""
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.rand(tokens.shape, generator=gen) < mask_prob
    return chosen & ~torch.isin(tokens, special)


@torch.no_grad()
def masked_lm_bits(
    model,
    blocks: torch.Tensor,
    mask_idx: int,
    special: torch.Tensor,
    mask_prob: float = 0.15,
    seed: int = 0,
    batch_size: int = 8,
) -> MaskedLmScore:
    """Score a fairseq RoBERTa-style model on ``blocks`` ``(N, L)`` of token ids.

    ``model(src_tokens)[0]`` must give ``(B, L, V)`` logits. ``special`` lists ids never
    masked (``<s>``, ``</s>``, ``<pad>``).
    """
    masked = mask_positions(blocks, special, mask_prob, seed)
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for start in range(0, len(blocks), batch_size):
        tokens, where = blocks[start : start + batch_size], masked[start : start + batch_size]
        inputs = tokens.masked_fill(where, mask_idx).to(device)
        logits = model(inputs)[0].double().cpu()
        total += torch.nn.functional.cross_entropy(logits[where], tokens[where], reduction="sum").item()
        count += int(where.sum())
    if count == 0:
        raise ValueError("blocks: no token was masked; give more or longer blocks")
    return MaskedLmScore(total / count / math.log(2), count)
