"""The "reference" backend: the band as a dense (T, T) mask. O(T^2); for tests only."""

from __future__ import annotations

import torch

from ..band import head_band_mask
from ..dense import compute_dtype, masked_attention
from ..spec import BandSpec, PositionTerm


def dense_position_scores(position: PositionTerm, spec: BandSpec, seq_len: int) -> torch.Tensor:
    """The relative-position term as a dense ``(B, H, T, T)`` tensor (0 off the band)."""
    per_column = torch.einsum("bhid,hcd->bhic", position.query, position.table)  # (B, H, T, W)
    pos = torch.arange(seq_len, device=per_column.device)
    offset = pos[None, :] - pos[:, None]  # key - query
    dil = torch.tensor(spec.dilations, device=per_column.device)[:, None, None]
    column = torch.div(offset, dil, rounding_mode="floor") + spec.window  # (H, T, T)
    column = column.clamp(0, per_column.shape[-1] - 1).expand(per_column.shape[0], -1, -1, -1)
    return per_column.gather(-1, column)


def reference_band_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec,
    position: PositionTerm | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    allowed = head_band_mask(q.shape[2], spec.window, spec.dilations, spec.causal, q.device)[None]
    if key_mask is not None:
        allowed = allowed & ~key_mask[:, None, None, :]
    bias = None
    if position is not None:
        dtype = compute_dtype(q.dtype)
        term = PositionTerm(position.query.to(dtype), position.table.to(dtype))
        bias = dense_position_scores(term, spec, q.shape[2]) * spec.scale
    return masked_attention(q, k, v, allowed, spec.scale, spec.dropout_p, bias)
