"""Functional Longformer attention: :func:`banded_attention`.

Semantics (docs/design.md §1): query ``i`` of head ``h`` attends to keys ``i + d_h * k``,
``k`` in ``[-w, w]`` (``[-w, 0]`` when causal), inside ``[0, T)`` and not padded.
Softmax runs in fp32 (or fp64) whatever the input dtype; padded query rows give 0.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .backends import get_backend
from .spec import BandSpec, PositionTerm
from .validation import check_dilation, check_mask, check_qkv, check_scale, check_window


def band_attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    spec: BandSpec,
    backend: str = "auto",
    position: PositionTerm | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Band attention in heads-first layout, returning the log-normaliser too.

    Arguments are already validated; see :mod:`.backends` for the contract. Used by
    :class:`~longformer_fs.attention.layer.LongformerSelfAttention` to merge the band
    with global keys, and by language models that add a relative-position term
    (``position``; then ``spec.relative`` must be True).
    """
    if (position is not None) != spec.relative:
        raise ValueError("position: give a PositionTerm exactly when spec.relative is True")
    if q.shape[2] == 0:
        return q.new_zeros(q.shape), q.new_zeros(q.shape[:3])
    return get_backend(backend, spec, q).fn(q, k, v, key_mask, spec, position)


def banded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    dilation: int | Sequence[int] = 1,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Sliding-window (optionally dilated, causal) attention.

    Args:
        q, k, v: ``(B, T, H, D)``. Any ``T``: padding to tile sizes is internal.
        window: one-sided window ``w >= 0``; ``w >= T`` is full (or causal) attention.
        dilation: ``d >= 1``, one int for all heads or one per head.
        causal: attend only to keys at or before the query.
        key_padding_mask: ``(B, T)`` bool, True marks padding (never attended; those
            query rows return 0). Anywhere in a row, except with ``backend="flash"``,
            which takes padding at the row ends only.
        scale: score multiplier; None means ``1 / sqrt(D)``.
        backend: ``"auto"`` (the fastest available here), or a name of
            :data:`~.backends.BACKENDS`: ``"flash"``, ``"flex"``, ``"kernel"``, ``"chunks"``,
            or ``"reference"`` (dense, tests only).

    Returns:
        ``(B, T, H, D)`` in the dtype of ``q``.
    """
    check_qkv(q, k, v)
    batch, seq_len, heads, head_dim = q.shape
    window = check_window(window)
    dilations = check_dilation(dilation, heads)
    scale = check_scale(scale, head_dim)
    pad = check_mask(key_padding_mask, "key_padding_mask", batch, seq_len, q.device, "padding")
    get_backend(backend)  # fail on a bad name before doing any work

    # A mask given here may have holes anywhere (the layers' masks are fairseq's padding), so
    # auto passes over flash; asked for by name, flash takes it and checks it on the device.
    spec = BandSpec(window, dilations, bool(causal), scale, padding_at_ends=pad is None or backend == "flash")
    out, _ = band_attention_with_lse(*(x.transpose(1, 2) for x in (q, k, v)), pad, spec, backend)
    if pad is not None:
        out = out.masked_fill(pad[:, None, :, None], 0.0)
    return out.transpose(1, 2).to(q.dtype)
