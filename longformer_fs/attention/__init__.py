"""Longformer attention in plain PyTorch (no fairseq imports).

- :func:`banded_attention`: sliding-window attention with per-head dilation, causal
  mode and padding, on ``(B, T, H, D)`` tensors.
- :class:`LongformerSelfAttention`: the full layer with global tokens and their own
  projections, on fairseq's ``(T, B, C)`` layout; :class:`GlobalTokens`, a batch's global
  tokens found once for all the layers of a model.
- :func:`available_backends`: which implementations run on this machine.
"""

from .backends import available_backends, get_backend
from .functional import banded_attention
from .layer import GlobalTokens, LongformerSelfAttention

__all__ = ["banded_attention", "GlobalTokens", "LongformerSelfAttention", "available_backends", "get_backend"]
