"""Index math of the dilated sliding window: the one Python reference.

Notation (docs/design.md §1): ``w`` is the one-sided window, ``d`` a head's dilation. Query
``i`` sees keys ``j = i + d*k`` for ``k`` in ``[-w, w]`` (``[-w, 0]`` when causal) that
fall inside ``[0, T)``. In banded storage, scores are kept as ``(..., T, W)`` with
``W = 2w + 1`` (``w + 1`` causal) and column ``c`` holds key ``i + d*(c - w)``.

The CUDA/C++ kernels mirror these functions in their shared header; tests compare the
two.
"""

from __future__ import annotations

import torch


def band_width(window: int, causal: bool) -> int:
    """Number of band columns ``W`` for a one-sided window."""
    return window + 1 if causal else 2 * window + 1


def band_key(query: int, column: int, window: int, dilation: int) -> int:
    """Key position held by band column ``column`` of query ``query`` (may be out of range)."""
    return query + dilation * (column - window)


def band_column(query: int, key: int, window: int, dilation: int, causal: bool) -> int | None:
    """Inverse of :func:`band_key`: the column of ``key`` in ``query``'s band, or None."""
    offset = key - query
    if offset % dilation:
        return None
    column = offset // dilation + window
    return column if 0 <= column < band_width(window, causal) else None


def effective_window(window: int, seq_len: int, dilation: int) -> int:
    """The smallest window with the same pattern at this length.

    Columns beyond ``ceil(T / d) - 1`` steps only ever point outside ``[0, T)``, so any
    larger window (including "window >= T") is equivalent and cheaper to compute.
    """
    steps = -(-seq_len // dilation) - 1
    return max(0, min(window, steps))


def residue_length(seq_len: int, dilation: int, residue: int) -> int:
    """Positions of the residue class ``r, r + d, ...`` below ``T``."""
    return (seq_len - residue + dilation - 1) // dilation if residue < seq_len else 0


def residue_order(seq_len: int, dilation: int) -> torch.Tensor:
    """``(T,)`` long: the positions of each residue class in turn, ``0, d, 2d, ..., 1, 1 + d, ...``.

    In this order a ``(w, d)`` band is an undilated ``w`` band inside each class's run of
    slots: query and key see each other exactly when they share a class and their slots
    are at most ``w`` apart (``[-w, 0]`` causal). ``T`` need not be a multiple of ``d``.
    """
    return torch.argsort(torch.arange(seq_len) % dilation, stable=True)


def band_mask(
    seq_len: int,
    window: int,
    dilation: int,
    causal: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Dense ``(T, T)`` bool mask, True where query ``i`` may attend to key ``j``.

    Only the band pattern: padding and global tokens are applied by the caller.
    """
    pos = torch.arange(seq_len, device=device)
    return in_band(pos[None, :] - pos[:, None], window, dilation, causal)


def in_band(offset: torch.Tensor, window: int, dilation: int, causal: bool) -> torch.Tensor:
    """Whether a ``(w, d)`` band holds the key ``offset`` (key minus query) positions from its
    query: bool, ``offset``'s shape. The vectorised :func:`band_column` is not None."""
    upper = 0 if causal else window * dilation
    return (offset % dilation == 0) & (offset >= -window * dilation) & (offset <= upper)


def head_band_columns(
    seq_len: int,
    window: int,
    dilations: tuple[int, ...],
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(H, T, T)`` long: the band column of key ``j`` for query ``i`` in head ``h``.

    Vectorised :func:`band_column` for dense references; meaningful only where
    :func:`head_band_mask` is True (elsewhere it is some value in ``[0, 2w]``).
    """
    pos = torch.arange(seq_len, device=device)
    offset = pos[None, :] - pos[:, None]  # key - query
    dil = torch.tensor(dilations, device=device)[:, None, None]
    return (torch.div(offset, dil, rounding_mode="floor") + window).clamp(0, 2 * window)


def head_band_mask(
    seq_len: int,
    window: int,
    dilations: tuple[int, ...],
    causal: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(H, T, T)`` band masks, one per head's dilation."""
    masks = {d: band_mask(seq_len, window, d, causal, device) for d in set(dilations)}
    return torch.stack([masks[d] for d in dilations])


def same_document(query_documents: torch.Tensor, key_documents: torch.Tensor) -> torch.Tensor:
    """``(B, 1, Tq, Tk)`` bool, True where a query and a key are of one document.

    Args:
        query_documents: ``(B, Tq)`` the queries' document ids.
        key_documents: ``(B, Tk)`` the keys'.
    """
    return query_documents[:, None, :, None] == key_documents[:, None, None, :]
