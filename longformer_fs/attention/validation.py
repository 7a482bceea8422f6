"""Argument checks shared by the functional API and the layer.

Every failure is a ValueError that names the offending argument, raised before any
computation, so users never see a shape error from deep inside a backend.
"""

from __future__ import annotations

import numbers
import operator
from typing import NamedTuple, Sequence

import torch


def check_window(window) -> int:
    if isinstance(window, bool) or not isinstance(window, numbers.Integral):
        raise ValueError(f"window: expected an int >= 0 (one-sided width), got {window!r}")
    window = operator.index(window)
    if window < 0:
        raise ValueError(f"window: must be >= 0 (one-sided width), got {window}")
    return window


def check_dilation(dilation, num_heads: int) -> tuple[int, ...]:
    """Normalise ``dilation`` (an int or one int per head) to a per-head tuple."""
    if isinstance(dilation, torch.Tensor):
        dilation = dilation.tolist()
    if isinstance(dilation, Sequence) and not isinstance(dilation, str):
        values = list(dilation)
        if len(values) != num_heads:
            raise ValueError(
                f"dilation: got {len(values)} values for {num_heads} heads; give one int or exactly one per head"
            )
    else:
        values = [dilation] * num_heads
    for d in values:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
            raise ValueError(f"dilation: every value must be an int >= 1, got {dilation!r}")
    return tuple(int(d) for d in values)


def check_heads(embed_dim, num_heads) -> int:
    """``embed_dim`` split over ``num_heads``; returns the head dimension."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads: expected an int >= 1, got {num_heads!r}")
    if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1 or embed_dim % num_heads:
        raise ValueError(f"embed_dim: {embed_dim!r} is not divisible by num_heads={num_heads}")
    return embed_dim // num_heads


def check_dropout(dropout) -> float:
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
    return float(dropout)


class LayerArgs(NamedTuple):
    """A band layer's constructor arguments, checked: ``head_dim = C / H``, the one-sided
    window, one dilation per head, the attention dropout."""

    head_dim: int
    window: int
    dilations: tuple[int, ...]
    dropout: float


def check_layer(embed_dim, num_heads, window, dilation, dropout) -> LayerArgs:
    """What both band layers (:mod:`.layer`, :mod:`.relative_layer`) check when built, in
    one order, so that they refuse the same arguments with the same messages."""
    head_dim = check_heads(embed_dim, num_heads)
    return LayerArgs(head_dim, check_window(window), check_dilation(dilation, num_heads), check_dropout(dropout))


def check_scale(scale, head_dim: int) -> float:
    if scale is None:
        return head_dim**-0.5
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale: expected a float or None, got {scale!r}")
    return float(scale)


def check_mask(mask, name: str, batch: int, seq_len: int, device: torch.device, marks: str):
    """A (B, T) bool mask or None; ``marks`` says what True means, for the message."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name}: expected a bool tensor of shape ({batch}, {seq_len}), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name}: expected dtype torch.bool (True = {marks}), got {mask.dtype}")
    return _per_position(mask, name, batch, seq_len, device)


def _per_position(x: torch.Tensor, name: str, batch: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """``x``, a value per position ``(B, T)`` on the inputs' device, or a one-line ValueError."""
    if tuple(x.shape) != (batch, seq_len):
        raise ValueError(f"{name}: expected shape ({batch}, {seq_len}) = (B, T), got {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"{name}: is on {x.device} but the inputs are on {device}")
    return x


def check_documents(documents, batch: int, seq_len: int, device: torch.device):
    """A ``(B, T)`` integer tensor of document ids, or None. Positions of one document are
    contiguous in a row and the ids do not decrease along it (a packing's rows are so; the
    mask-based backends do not need it, the segment-based ones do, and no check here reads
    the values back from a GPU)."""
    if documents is None:
        return None
    if not isinstance(documents, torch.Tensor) or documents.dtype.is_floating_point or documents.dtype == torch.bool:
        got = documents.dtype if isinstance(documents, torch.Tensor) else type(documents).__name__
        raise ValueError(f"documents: expected an integer tensor of shape ({batch}, {seq_len}), got {got}")
    return _per_position(documents, "documents", batch, seq_len, device)


def check_qkv(q, k, v) -> None:
    """q, k, v: floating tensors of one shape (B, T, H, D), dtype and device."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name}: expected a tensor of shape (B, T, H, D), got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name}: expected 4 dimensions (B, T, H, D), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise ValueError(f"{name}: expected a floating dtype, got {x.dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.shape != q.shape:
            raise ValueError(f"{name}: shape {tuple(x.shape)} does not match q's {tuple(q.shape)} (B, T, H, D)")
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: dtype {x.dtype} does not match q's {q.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name}: is on {x.device} but q is on {q.device}")
