"""The "reference" backend: the band as a dense (T, T) mask. O(T^2); for tests only."""

from __future__ import annotations

import torch

from ..band import head_band_mask
from ..dense import masked_attention


def reference_band_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    window: int,
    dilations: tuple[int, ...],
    causal: bool,
    key_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    allowed = head_band_mask(q.shape[2], window, dilations, causal, q.device)[None]
    if key_mask is not None:
        allowed = allowed & ~key_mask[:, None, None, :]
    return masked_attention(q, k, v, allowed, scale, dropout_p)
