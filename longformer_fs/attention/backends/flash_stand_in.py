"""The CPU contract of the CUDA op: what torch's FlashAttention-2 ops compute, in dense PyTorch.

This is not a backend, nor a fast path. ``aten::_flash_attention_forward`` and its
backward run only on CUDA, and CI has no GPU; on a CPU the ``flash`` backend calls the two
functions here in their place, so that its own code path runs there: in CI's tests against
the float64 oracle, and wherever a run on a CPU asks for ``flash`` by name (the oracle part
of ``longformer-fs report --device cpu``). ``auto`` never takes ``flash`` on a CPU, and
``longformer-fs info`` says what ``flash`` is there
(:func:`longformer_fs.attention.backends.backend_notes`). In a rehearsal the GPU's calls,
on ``meta``, go to aten's own ops, held to the CUDA ops' checks
(:func:`~longformer_fs.attention.backends.flash.cuda_contract`).

Everything the ``flash`` backend does around those two ops (the residue order, the
segments, the windows, the log-sum-exp's layout and gradient, the merge) is index logic
that can be wrong on any device. This module computes what the two ops compute, densely
and in the inputs' precision (float64 for the oracle tests), so that logic runs against
the float64 oracle on a CPU:

- ``forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
  return_debug_mask, *, scale, window_size_left, window_size_right)`` on packed
  ``(total, H, D)`` tensors, segment ``s`` holding rows ``cum_seq[s]:cum_seq[s + 1]``;
  returns ``(out, logsumexp, rng_state, unused, debug_attn_mask)``;
- ``backward(grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
  dropout_p, is_causal, rng_state, unused, *, scale, window_size_left,
  window_size_right)`` returns ``(dq, dk, dv)``.

As FlashAttention-2 does:

- a query sees the keys of its own segment whose offset from it, with the segment's
  keys aligned to its queries' end, lies in ``[-left, right]`` (``-1``: unbounded);
- the log-sum-exp is ``(H, total)``, or FlashAttention's older ``(segments, H, max_q)``
  when :data:`LSE_LAYOUT` says ``"padded"`` (the backend reads either);
- dropout drops probabilities after the normaliser is taken and scales the kept ones by
  ``1 / (1 - p)``; ``rng_state`` replays the same draw in the backward;
- the debug mask holds each segment's probabilities, negated where dropped;
- the backward takes ``D = rowsum(grad_out * out)`` from the ``out`` it is given, and
  ``dS = P * (dP - D)``: so an ``out`` other than the forward's shifts ``D``, which the
  backend uses to pass the log-sum-exp's gradient.

Dense in ``total``: for tests on a few hundred rows, never for speed.
"""

from __future__ import annotations

import torch

LSE_LAYOUT = "packed"  # or "padded": the two layouts FlashAttention-2's varlen forward has returned


def _segments(cum_seq: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each packed row's segment and its offset in it: ``(total,)`` long, twice."""
    rows = torch.arange(total)
    segment = torch.searchsorted(cum_seq.long().cpu(), rows, right=True) - 1
    return segment, rows - cum_seq.long().cpu()[segment]


def _allowed(cum_q, cum_k, total_q, total_k, left: int, right: int) -> torch.Tensor:
    """``(total_q, total_k)`` bool: the pairs FlashAttention-2's window admits."""
    seg_q, off_q = _segments(cum_q, total_q)
    seg_k, off_k = _segments(cum_k, total_k)
    len_q = (cum_q[1:] - cum_q[:-1]).long().cpu()[seg_q]
    len_k = (cum_k[1:] - cum_k[:-1]).long().cpu()[seg_q]
    # Keys aligned to the end of the queries: query i faces key i + (len_k - len_q).
    offset = off_k[None, :] - (off_q + len_k - len_q)[:, None]
    allowed = seg_q[:, None] == seg_k[None, :]
    if left >= 0:
        allowed &= offset >= -left
    if right >= 0:
        allowed &= offset <= right
    return allowed


def _keep(rng_state: torch.Tensor, shape, dropout_p: float) -> torch.Tensor:
    """The dropout draw that ``rng_state`` names: ``(H, total_q, total_k)`` bool, True kept."""
    generator = torch.Generator().manual_seed(int(rng_state[0]))
    return torch.rand(shape, generator=generator) >= dropout_p


def _probabilities(q, k, cum_q, cum_k, scale, left, right):
    """Scores ``(H, total_q, total_k)``, the admitted pairs, probabilities and log-sum-exp ``(H, total_q)``."""
    allowed = _allowed(cum_q, cum_k, q.shape[0], k.shape[0], left, right)
    scores = torch.einsum("ihd,jhd->hij", q, k) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    return probs, lse, allowed


def forward(
    q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *,
    scale=None, window_size_left=None, window_size_right=None,
):  # fmt: skip
    """``aten::_flash_attention_forward`` for packed inputs, computed densely."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    left = -1 if window_size_left is None else window_size_left
    right = (0 if is_causal else -1) if window_size_right is None else window_size_right
    dtype = torch.promote_types(q.dtype, torch.float32)  # FlashAttention accumulates in float32
    probs, lse, allowed = _probabilities(q.to(dtype), k.to(dtype), cum_seq_q, cum_seq_k, scale, left, right)
    rng_state = torch.randint(0, 2**62, (2,), dtype=torch.int64)
    weights = probs
    keep = None
    if dropout_p > 0:
        keep = _keep(rng_state, probs.shape, dropout_p)
        weights = probs * keep / (1 - dropout_p)
    out = torch.einsum("hij,jhd->ihd", weights, v.to(dtype)).to(q.dtype)
    debug = torch.empty(0, dtype=q.dtype)
    if return_debug_mask:
        debug = _debug_mask(probs, keep, cum_seq_q, cum_seq_k, max_q, max_k).to(q.dtype)
    if LSE_LAYOUT == "padded":
        lse = _padded(lse, cum_seq_q, max_q)
    return out, lse.float() if lse.dtype != torch.float64 else lse, rng_state, torch.empty(0), debug


def _padded(lse: torch.Tensor, cum_seq: torch.Tensor, max_len: int) -> torch.Tensor:
    """``(H, total)`` -> ``(segments, H, max_len)``, as FlashAttention-2 once laid it out."""
    segment, offset = _segments(cum_seq, lse.shape[1])
    padded = lse.new_full((len(cum_seq) - 1, lse.shape[0], max_len), float("inf"))
    padded[segment, :, offset] = lse.T
    return padded


def _packed(lse: torch.Tensor, cum_seq: torch.Tensor, total: int) -> torch.Tensor:
    if lse.dim() == 2:
        return lse
    segment, offset = _segments(cum_seq, total)
    return lse[segment, :, offset].T


def _debug_mask(probs, keep, cum_q, cum_k, max_q, max_k) -> torch.Tensor:
    """``(segments, H, max_q, max_k)``: each segment's probabilities, negated where dropped."""
    signed = probs if keep is None else torch.where(keep, probs, -probs)
    seg_q, off_q = _segments(cum_q, probs.shape[1])
    seg_k, off_k = _segments(cum_k, probs.shape[2])
    mask = probs.new_zeros((len(cum_q) - 1, probs.shape[0], max_q, max_k))
    same = seg_q[:, None] == seg_k[None, :]
    i, j = same.nonzero(as_tuple=True)
    mask[seg_q[i], :, off_q[i], off_k[j]] = signed[:, i, j].T
    return mask


def backward(
    grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state,
    unused, *, scale=None, window_size_left=None, window_size_right=None,
):  # fmt: skip
    """``aten::_flash_attention_backward``, with FlashAttention-2's ``D = rowsum(grad_out * out)``."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    left = -1 if window_size_left is None else window_size_left
    right = (0 if is_causal else -1) if window_size_right is None else window_size_right
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v, grad_out, out = (x.to(dtype) for x in (q, k, v, grad_out, out))
    allowed = _allowed(cum_seq_q, cum_seq_k, q.shape[0], k.shape[0], left, right)
    lse = _packed(logsumexp, cum_seq_q, q.shape[0]).to(dtype)
    scores = torch.einsum("ihd,jhd->hij", q, k) * scale
    probs = torch.exp(scores - lse[..., None]).masked_fill(~allowed, 0.0)
    factor = torch.ones_like(probs)
    if dropout_p > 0:
        factor = _keep(rng_state, probs.shape, dropout_p).to(dtype) / (1 - dropout_p)
    grad_probs = torch.einsum("ihd,jhd->hij", grad_out, v) * factor
    rowsum = (grad_out * out).sum(-1).T  # (H, total_q)
    grad_scores = probs * (grad_probs - rowsum[..., None])
    dq = torch.einsum("hij,jhd->ihd", grad_scores, k) * scale
    dk = torch.einsum("hij,ihd->jhd", grad_scores, q) * scale
    dv = torch.einsum("hij,ihd->jhd", probs * factor, grad_out)
    return dq, dk, dv
