"""The "reference" backend: the band as a dense (T, T) mask. O(T^2); for tests only."""

from __future__ import annotations

import torch

from .. import calls
from ..band import head_band_columns, head_band_mask, same_document
from ..dense import compute_dtype, masked_attention
from ..spec import BandOutput, BandSpec, PositionTerm


def dense_position_scores(position: PositionTerm, spec: BandSpec, seq_len: int) -> torch.Tensor:
    """The relative-position term as a dense ``(B, H, T, T)`` tensor (0 off the band)."""
    per_column = torch.einsum("bhid,hcd->bhic", position.query, position.table)  # (B, H, T, W)
    column = head_band_columns(seq_len, spec.window, spec.dilations, per_column.device)
    column = column.clamp(max=per_column.shape[-1] - 1)  # causal tables stop at column w
    return per_column.gather(-1, column.expand(per_column.shape[0], -1, -1, -1))


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs computed for one batch row: all ``T x T``, per head."""
    return len(spec.dilations) * seq_len * seq_len


def allowed_pairs(
    seq_len: int, key_mask: torch.Tensor | None, spec: BandSpec, device, documents: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B or 1, H, T, T)`` bool: the (query, key) pairs a call's band admits: in the band,
    not padded, and of the query's own document."""
    allowed = head_band_mask(seq_len, spec.window, spec.dilations, spec.causal, device)[None]
    if key_mask is not None:
        allowed = allowed & ~key_mask[:, None, None, :]
    return allowed if documents is None else allowed & same_document(documents, documents)


def reference_band_attention(
    q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None = None, documents: torch.Tensor | None = None
) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`."""
    calls.record("reference", spec)
    allowed = allowed_pairs(q.shape[2], key_mask, spec, q.device, documents)
    bias = None
    if position is not None:
        dtype = compute_dtype(q.dtype)
        term = PositionTerm(position.query.to(dtype), position.table.to(dtype))
        bias = dense_position_scores(term, spec, q.shape[2]) * spec.scale
    return masked_attention(q, k, v, allowed, spec.scale, spec.dropout_p, bias)
