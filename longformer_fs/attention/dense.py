"""Dense masked attention, O(Tq * Tk): the "reference" backend and the global parts.

Global attention is dense by nature (a global row sees every key, every row sees the
global keys), so it is computed here; the band itself never is, except by the
``"reference"`` backend that exists for tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import devices
from .softmax import masked_softmax_with_lse


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores and softmax run in fp32 at least (fp16 scores overflow; docs/design.md §1)."""
    return torch.promote_types(dtype, torch.float32)


def _float32_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for half ``(N, n, k)`` and ``(N, k, m)``, accumulated into and returned in float32
    by the matmul itself (``aten::bmm.dtype``): no float32 copy of either input."""
    return torch.bmm(a, b, out_dtype=torch.float32)


class _HalfScores(torch.autograd.Function):
    """``q @ k^T * scale`` in float32 for half ``q`` ``(B, H, Tq, D)`` and ``k`` ``(B, H, Tk, D)``.

    ``aten::bmm.dtype`` has no derivative (torch 2.11 to 2.14 register one for ``bmm`` only),
    so it gets one here. The backward takes the scores' gradient in the inputs' precision,
    as FlashAttention's backward takes ``dS``, and its two products accumulate in float32
    inside the matmul: ``dq`` and ``dk`` come out in the inputs' dtype, with no float32 copy
    of ``q`` in either pass.
    """

    @staticmethod
    def forward(ctx, q, k, scale):
        ctx.save_for_backward(q, k)
        ctx.scale = scale
        batch, heads, length, dim = q.shape
        flat = _float32_product(
            q.reshape(batch * heads, length, dim), k.transpose(-1, -2).reshape(batch * heads, dim, -1)
        )
        return flat.view(batch, heads, length, -1) * scale

    @staticmethod
    def backward(ctx, grad):
        q, k = ctx.saved_tensors
        grad = (grad * ctx.scale).to(q.dtype)
        dq = torch.matmul(grad, k) if ctx.needs_input_grad[0] else None
        dk = torch.matmul(grad.transpose(-1, -2), q) if ctx.needs_input_grad[1] else None
        return dq, dk, None


def float32_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``q @ k^T * scale`` in float32 or wider, ``(B, H, Tq, Tk)``, for ``q`` ``(B, H, Tq, D)`` and
    ``k`` ``(B, H, Tk, D)``, differentiable.

    Half inputs on a GPU (:func:`~longformer_fs.devices.fused_float32_products`) accumulate into
    float32 inside the matmul, without a float32 copy of ``q``; elsewhere both are cast first.
    """
    dtype = compute_dtype(q.dtype)
    if q.dtype != dtype and devices.fused_float32_products(q.device):
        return _HalfScores.apply(q, k, scale)
    return torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2)) * scale


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
