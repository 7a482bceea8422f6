"""Dense masked attention, O(Tq * Tk): the "reference" backend and the global parts.

Global attention is dense by nature (a global row sees every key, every row sees the
global keys), so it is computed here; the band itself never is, except by the
``"reference"`` backend that exists for tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .softmax import masked_softmax_with_lse


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores and softmax run in fp32 at least (fp16 scores overflow; docs/design.md §1)."""
    return torch.promote_types(dtype, torch.float32)


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
    dropout_p: float = 0.0,
    bias: torch.Tensor | None = None,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of every query over the allowed keys.

    Args:
        q: ``(B, H, Tq, D)``; k, v: ``(B, H, Tk, D)``.
        allowed: bool broadcastable to ``(B, H, Tq, Tk)``.
        scale: multiplies the scores.
        dropout_p: dropout on the probabilities (after the normaliser is taken).
        bias: added to the scaled scores, broadcastable to ``(B, H, Tq, Tk)``.
        keep: with ``dropout_p``, a given draw in place of a random one: bool, True for
            the pairs kept (checks that replay another implementation's dropout).

    Returns:
        ``out`` ``(B, H, Tq, D)`` and ``lse`` ``(B, H, Tq)``, both in the compute dtype.
    """
    dtype = compute_dtype(q.dtype)
    scores = torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    probs, lse = masked_softmax_with_lse(scores, allowed)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p) if keep is None else probs * keep / (1 - dropout_p)
    return torch.matmul(probs, v.to(dtype)), lse
