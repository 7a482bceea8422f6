"""Transformer-XL relative positions in band layout.

Band column ``c`` of a head with dilation ``d`` holds the key ``d * (w - c)`` positions
before the query (negative: after it). A language model projects the sinusoidal
embedding of these distances per layer and head into the ``(H, W, D)`` table of a
:class:`~longformer_fs.attention.spec.PositionTerm`; nothing is ever T x T.
"""

from __future__ import annotations

import torch

from .band import band_width


def band_distances(
    window: int, dilations: tuple[int, ...], causal: bool, device: torch.device | str | None = None
) -> torch.Tensor:
    """``(H, W)`` long on ``device``: query position minus key position for each band column.

    Built where it is used, from ``arange``: no table is copied to the device per call."""
    return head_distances(window - torch.arange(band_width(window, causal), device=device), dilations)


def head_distances(steps: torch.Tensor, dilations: tuple[int, ...]) -> torch.Tensor:
    """``(H, N)``: each head's distances ``d_h * steps`` for ``steps`` ``(N,)``, stacked from
    Python ints (a tensor of the dilations would be a copy to the device at every call)."""
    per_dilation = {d: steps * d for d in set(dilations)}
    return torch.stack([per_dilation[d] for d in dilations])


def sinusoid(distances: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer-XL's sinusoidal embedding: ``(..., dim)``, sines then cosines.

    Args:
        distances: any shape, in positions.
        dim: embedding size, even.
    """
    if dim % 2:
        raise ValueError(f"dim: the sinusoidal embedding needs an even size, got {dim}")
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64, device=distances.device) / dim))
    angles = distances.to(torch.float64)[..., None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1).to(torch.get_default_dtype())
