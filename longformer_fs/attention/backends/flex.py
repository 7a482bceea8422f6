"""The "flex" backend: PyTorch's FlexAttention with a block-sparse band.

FlexAttention is a PyTorch-maintained kernel generator: a ``mask_mod`` says which
(query, key) pairs exist and a ``BlockMask`` says which tiles to visit at all. Here:

- the ``BlockMask`` is computed from the band's geometry, per head when dilations
  differ, in O((T / 128)^2) work (never T^2), and cached per shape. Tiles that lie
  wholly inside an undilated band are marked *full*, so FlexAttention skips the mask
  there; with padding no tile is full, since padded keys hide in any tile;
- ``mask_mod`` adds dilation (``(j - i) % d == 0``), causality and key padding;
- the relative-position term becomes a ``score_mod`` that adds a ``(B, H, T, W)`` bias
  gathered by band column: memory O(T * W), like ``chunks`` (never T x T);
- FlexAttention returns the row log-sum-exp that the layer merges with global keys.

FlexAttention computes in the input dtype with fp32 softmax statistics; the output is
returned in the compute dtype. It has no attention dropout.

On GPU the backend runs ``torch.compile``'d FlexAttention, forward and backward. On CPU,
this torch's compiled FlexAttention is inference-only and cannot return the log-sum-exp,
and FlexAttention has no CPU backward at all, so the backend runs FlexAttention's eager
reference path there (dense, O(T^2): for tests of the masks, not for speed) and
refuses gradients. ``auto`` never picks it on CPU.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention

from ..band import band_width
from ..dense import compute_dtype
from ..spec import BandSpec, PositionTerm

BLOCK = 128  # FlexAttention's default tile, queries and keys


def unavailable_reason() -> str | None:
    return None


def supports(spec: BandSpec, device: torch.device | None = None) -> bool:
    """FlexAttention has no attention dropout."""
    return spec.dropout_p == 0.0


@lru_cache(maxsize=None)
def compiled_flex():
    """One compiled FlexAttention for the process; it specialises per shape."""
    return torch.compile(flex_attention, dynamic=False)


def band_tiles(
    seq_len: int, window: int, dilations: tuple[int, ...], causal: bool, padded: bool, block: int = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ``block x block`` tiles of the ``(T, T)`` score matrix to visit.

    Returns:
        ``partial`` and ``full``, ``(H', nb, nb)`` bool with ``nb = ceil(T / block)`` and
        ``H'`` 1 when every head has the same dilation (else one per head): ``partial``
        tiles hold some band pairs and need the mask; ``full`` tiles hold only band
        pairs (never with dilation or padding).
    """
    starts = torch.arange(0, seq_len, block)
    ends = torch.clamp(starts + block, max=seq_len) - 1  # inclusive
    q_lo, q_hi, k_lo, k_hi = starts[:, None], ends[:, None], starts[None, :], ends[None, :]
    partial, full = [], []
    for d in sorted(set(dilations)) if len(set(dilations)) == 1 else dilations:
        below, above = window * d, (0 if causal else window * d)  # reach before and after the query
        touch = (k_lo <= q_hi + above) & (k_hi >= q_lo - below)
        inside = (k_hi - q_lo <= above) & (k_lo - q_hi >= -below) if d == 1 and not padded else torch.zeros_like(touch)
        partial.append(touch & ~inside)
        full.append(inside)
    return torch.stack(partial), torch.stack(full)


def _indices(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H', nq, nk)`` bool -> FlexAttention's ``(1, H', nq)`` counts and ``(1, H', nq, nk)``
    indices (the visited key tiles of each query tile first, ascending)."""
    counts = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts[None], order[None]


@lru_cache(maxsize=64)
def _tile_lists(seq_len: int, window: int, dilations: tuple[int, ...], causal: bool, padded: bool, device: str):
    partial, full = band_tiles(seq_len, window, dilations, causal, padded)
    return tuple(t.to(device) for t in (*_indices(partial), *_indices(full)))


def band_block_mask(seq_len: int, spec: BandSpec, key_ok: torch.Tensor | None, device: torch.device) -> BlockMask:
    """The call's ``BlockMask``: cached tile lists and a ``mask_mod`` with its padding."""
    num, idx, full_num, full_idx = _tile_lists(
        seq_len, spec.window, spec.dilations, spec.causal, key_ok is not None, str(device)
    )
    dilation = torch.tensor(spec.dilations, device=device)
    window, upper = spec.window, (0 if spec.causal else spec.window)

    def mask_mod(b, h, q_idx, kv_idx):
        d = dilation[h]
        offset = kv_idx - q_idx
        allowed = (offset % d == 0) & (offset >= -window * d) & (offset <= upper * d)
        return allowed if key_ok is None else allowed & key_ok[b, kv_idx]

    return BlockMask.from_kv_blocks(
        num, idx, full_num, full_idx, BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(seq_len, seq_len)
    )


def flex_band_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    spec: BandSpec,
    position: PositionTerm | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    if not supports(spec, q.device):
        raise ValueError("backend: 'flex' has no attention dropout; use backend='auto' or 'chunks'")
    inputs = (q, k, v) if position is None else (q, k, v, position.query, position.table)
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)
    if q.device.type == "cpu" and needs_grad:
        raise ValueError(
            f"backend: 'flex' has no backward on CPU in torch {torch.__version__} (a FlexAttention "
            "limit); train on CPU with backend='kernel' or 'chunks'"
        )
    batch, heads, seq_len, _ = q.shape
    key_ok = None if key_mask is None else ~key_mask
    block_mask = band_block_mask(seq_len, spec, key_ok, q.device)
    score_mod = None
    if position is not None:
        width = band_width(spec.window, spec.causal)
        bias = torch.einsum("bhid,hcd->bhic", position.query, position.table.to(position.query.dtype)) * spec.scale
        dilation = torch.tensor(spec.dilations, device=q.device)
        window = spec.window

        def score_mod(score, b, h, q_idx, kv_idx):
            column = torch.clamp(torch.div(kv_idx - q_idx, dilation[h], rounding_mode="floor") + window, 0, width - 1)
            return score + bias[b, h, q_idx, column]

    with warnings.catch_warnings():
        # On CPU the eager path is chosen on purpose (see the module docstring).
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        flex = compiled_flex() if q.device.type == "cuda" else flex_attention
        out, aux = flex(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=spec.scale, return_aux=AuxRequest(lse=True)
        )
    return out.to(compute_dtype(q.dtype)), aux.lse.to(compute_dtype(q.dtype))
