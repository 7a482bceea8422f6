"""Masked softmax that keeps its log-normaliser, and merging of partial attentions.

Attention over a key set split in two parts (the band and the global keys) is the
softmax over their union. Each part returns its output and log-sum-exp; merging them
rescales the outputs, exactly as one softmax over the concatenated scores would.

Rows with no allowed key are legal here (padded queries, or a global token whose band
holds only itself): they give output 0 and lse = -inf, with finite gradients.
"""

from __future__ import annotations

import torch


class _MaskedSoftmax(torch.autograd.Function):
    """``(scores, allowed) -> (probs, lse)``; backward keeps only ``probs``.

    With ``P = softmax(S)`` and ``L = logsumexp(S)``:
    ``dS = P * (dP - rowsum(P * dP) + dL)``.
    """

    @staticmethod
    def forward(ctx, scores, allowed):
        masked = scores.masked_fill(~allowed, float("-inf"))
        row_max = masked.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        probs = masked.sub_(row_max).exp_()
        total = probs.sum(dim=-1, keepdim=True)
        nonempty = total > 0
        probs.div_(torch.where(nonempty, total, torch.ones_like(total)))
        lse = torch.where(nonempty, row_max + torch.log(total), torch.full_like(total, float("-inf")))
        ctx.save_for_backward(probs)
        ctx.mark_non_differentiable(allowed)
        return probs, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, grad_probs, grad_lse):
        (probs,) = ctx.saved_tensors
        grad = torch.zeros_like(probs) if grad_probs is None else grad_probs
        inner = (grad * probs).sum(dim=-1, keepdim=True)
        shift = -inner if grad_lse is None else grad_lse.unsqueeze(-1) - inner
        return (grad + shift) * probs, None


def masked_softmax_with_lse(scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last dimension restricted to ``allowed`` keys.

    Args:
        scores: ``(..., K)`` floating scores (already scaled).
        allowed: bool, broadcastable to ``scores``.

    Returns:
        ``probs`` shaped like ``scores`` (0 where not allowed, all-0 rows where nothing is
        allowed) and ``lse`` of shape ``scores.shape[:-1]`` (-inf for such rows).
    """
    return _MaskedSoftmax.apply(scores, allowed.expand_as(scores))


def merge_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two attentions over disjoint key sets into attention over their union.

    Args:
        out_a, out_b: ``(..., T, D)`` normalised outputs of each part.
        lse_a, lse_b: ``(..., T)`` log-sum-exp of each part's scores.

    Returns:
        ``(out, lse)`` of the union; rows empty in both parts stay 0 / -inf.
    """
    shift = torch.maximum(lse_a, lse_b).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    weight_a = torch.exp(lse_a - shift)
    weight_b = torch.exp(lse_b - shift)
    total = weight_a + weight_b
    nonempty = total > 0
    safe_total = torch.where(nonempty, total, torch.ones_like(total))
    out = (weight_a.unsqueeze(-1) * out_a + weight_b.unsqueeze(-1) * out_b) / safe_total.unsqueeze(-1)
    lse = torch.where(nonempty, shift + torch.log(safe_total), torch.full_like(total, float("-inf")))
    return out, lse
