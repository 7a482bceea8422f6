"""The "reference" backend: the band as a dense (T, T) mask. O(T^2); for tests only."""

from __future__ import annotations

import torch

from ..band import head_band_mask
from ..dense import masked_attention
from ..spec import BandSpec


def reference_band_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    allowed = head_band_mask(q.shape[2], spec.window, spec.dilations, spec.causal, q.device)[None]
    if key_mask is not None:
        allowed = allowed & ~key_mask[:, None, None, :]
    return masked_attention(q, k, v, allowed, spec.scale, spec.dropout_p)
