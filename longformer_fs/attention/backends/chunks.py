"""The "chunks" backend: banded attention in vectorised PyTorch, memory O(T * w).

Queries are cut into blocks of ``b`` rows. A block starting at ``s`` needs keys
``[s - w, s + b + W - 1 - w)``, so one batched matmul gives a ``b x (b + W - 1)`` score
tile per block, and the band is the tile's shifted diagonals: a strided view of the
tile (:func:`_band_view`). Probabilities are written back through the same view into
zeroed tiles for the value product. Work per query is ``b + W - 1`` scores against ``W`` needed;
``b ~ W / 2`` keeps the overhead near 1.5x, where HF's overlapping chunks compute 2x
(and 4x in causal mode).

Dilation ``d`` is the undilated problem on the ``d`` interleaved subsequences
``i = r (mod d)`` (docs/design.md §1), folded into the batch dimension; heads with different
dilations are run as separate groups.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import calls
from ..band import band_width, effective_window
from ..dense import compute_dtype
from ..softmax import masked_softmax_with_lse
from ..spec import BandOutput, BandSpec, PositionTerm

# Below this, per-block overhead dominates the wasted scores.
MIN_BLOCK = 32


def block_size(width: int) -> int:
    """Query rows per block for a band of ``width`` columns: about ``W / 2``.

    Measured on 2 CPU cores at T=4096, w=256, H=8, D=64 (fwd+bwd): b=256 takes 554 ms
    bidirectional against 569 (b=128) and 631 (b=512); causal, b=128 takes 303 ms
    against 320 (b=64) and 321 (b=256). Multiples of 16 keep the matmuls aligned.
    """
    half = (width - 1) // 2
    return max(MIN_BLOCK, -(-half // 16) * 16)


def _band_view(tiles: torch.Tensor, width: int) -> torch.Tensor:
    """View ``(..., b, b + W - 1)`` contiguous tiles as ``(..., b, W)`` bands.

    Row ``r`` of a tile holds keys ``s - w + c``; its band starts at column ``r``, so the
    band is the tile read with a row stride one element longer. No copy.
    """
    *lead, rows, span = tiles.shape
    stride = list(tiles.stride())
    return tiles.as_strided((*lead, rows, width), (*stride[:-2], span + 1, 1))


def _key_windows(x: torch.Tensor, left: int, right: int, rows: int, blocks: int) -> torch.Tensor:
    """Overlapping key/value windows: ``(N, H, T, D)`` -> ``(N, H, nb, b + W - 1, D)``."""
    span = rows + left + right
    padded = F.pad(x, (0, 0, left, blocks * rows - x.shape[2] + right))
    return padded.unfold(2, span, rows).transpose(-1, -2)


def undilated_band_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    key_ok: torch.Tensor,
    causal: bool,
    scale: float,
    dropout_p: float,
    pos_query: torch.Tensor | None = None,
    pos_table: torch.Tensor | None = None,
    documents: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sliding-window attention with dilation 1.

    Args:
        q, k, v: ``(N, H, T, D)`` in the compute dtype.
        window: one-sided window, already clamped to ``T - 1``.
        key_ok: ``(N, T)`` bool, True for keys that may be attended in the band.
        pos_query, pos_table: optional relative-position term, ``(N, H, T, D)`` and
            ``(H, W, D)`` for this window (see :class:`~..spec.PositionTerm`).
        documents: ``(N, T)`` document ids, or None: a query sees only its document's keys.

    Returns:
        ``out`` ``(N, H, T, D)`` and ``lse`` ``(N, H, T)``.
    """
    n, h, t, _ = q.shape
    width = band_width(window, causal)
    left, right = window, width - 1 - window
    rows = block_size(width)
    blocks = -(-t // rows)
    span = rows + width - 1

    q_blocks = F.pad(q * scale, (0, 0, 0, blocks * rows - t)).view(n, h, blocks, rows, -1)
    k_win = _key_windows(k, left, right, rows, blocks)
    tiles = torch.matmul(q_blocks, k_win.transpose(-1, -2))
    scores = _band_view(tiles, width)  # (n, h, blocks, rows, W), no copy
    if pos_query is not None:
        pq = F.pad(pos_query * scale, (0, 0, 0, blocks * rows - t)).view(n, h, blocks, rows, -1)
        scores = scores + torch.einsum("nhbrd,hcd->nhbrc", pq, pos_table)

    # allowed[n, i, c] = key_ok[n, i + c - w], False outside [0, T).
    ok = F.pad(key_ok, (left, blocks * rows - t + right)).unfold(1, width, 1)
    if documents is not None:  # the key's document is the query's: ids banded as the mask is
        band_docs = F.pad(documents, (left, blocks * rows - t + right), value=-1).unfold(1, width, 1)
        ok = ok & (band_docs == F.pad(documents, (0, blocks * rows - t), value=-1)[:, :, None])
    probs, lse = masked_softmax_with_lse(scores, ok.view(n, 1, blocks, rows, width))
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)

    p_tiles = probs.new_zeros(n, h, blocks, rows, span)
    _band_view(p_tiles, width).copy_(probs)
    v_win = _key_windows(v, left, right, rows, blocks)
    out = torch.matmul(p_tiles, v_win).view(n, h, blocks * rows, -1)
    return out[:, :, :t], lse.view(n, h, blocks * rows)[:, :, :t]


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs computed for one batch row: every block's ``b x (b + W - 1)`` tile,
    on each of a head's ``d`` residue classes (padded to ``ceil(T / d)``), summed over heads."""
    total = 0
    for d, heads in spec.head_groups().items():
        width = band_width(effective_window(spec.window, seq_len, d), spec.causal)
        rows, class_len = block_size(width), -(-seq_len // d)
        total += len(heads) * d * -(-class_len // rows) * rows * (rows + width - 1)
    return total


def _to_residues(x: torch.Tensor, d: int) -> torch.Tensor:
    """``(B, H, T, D)`` with ``T % d == 0`` -> ``(B*d, H, T/d, D)``, residue r = i mod d."""
    b, h, t, dim = x.shape
    return x.view(b, h, t // d, d, dim).permute(0, 3, 1, 2, 4).reshape(b * d, h, t // d, dim)


def _from_residues(x: torch.Tensor, d: int) -> torch.Tensor:
    """Inverse of :func:`_to_residues` for tensors shaped ``(B*d, H, T/d, *rest)``."""
    bd, h, tsub, *rest = x.shape
    x = x.view(bd // d, d, h, tsub, *rest).transpose(1, 2).transpose(2, 3)
    return x.reshape(bd // d, h, tsub * d, *rest)


def chunks_band_attention(
    q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None = None, documents: torch.Tensor | None = None
) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`."""
    calls.record("chunks", spec)
    b, h, t, _ = q.shape
    dtype = compute_dtype(q.dtype)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    key_ok = torch.ones(b, t, dtype=torch.bool, device=q.device) if key_mask is None else ~key_mask
    args = (spec.causal, spec.scale, spec.dropout_p)

    outs, lses, order = [], [], []
    for d, heads in spec.head_groups().items():
        idx = slice(None) if len(heads) == h else torch.tensor(heads, device=q.device)
        qs, ks, vs = (x[:, idx] for x in (q, k, v))
        w = effective_window(spec.window, t, d)
        pq = table = None
        if position is not None:
            pq = position.query[:, idx].to(dtype)
            table = position.columns(spec.window, w, spec.causal)[idx].to(dtype)
        if d == 1:
            out, lse = undilated_band_attention(qs, ks, vs, w, key_ok, *args, pq, table, documents)
        else:
            pad = -t % d
            qs, ks, vs = (_to_residues(F.pad(x, (0, 0, 0, pad)), d) for x in (qs, ks, vs))
            if pq is not None:
                pq = _to_residues(F.pad(pq, (0, 0, 0, pad)), d)
            ok, docs = (
                None if x is None else F.pad(x, (0, pad)).view(b, -1, d).transpose(1, 2).reshape(b * d, -1)
                for x in (key_ok, documents)
            )
            out, lse = undilated_band_attention(qs, ks, vs, w, ok, *args, pq, table, docs)
            out = _from_residues(out, d)[:, :, :t]
            lse = _from_residues(lse, d)[:, :, :t]
        outs.append(out)
        lses.append(lse)
        order.extend(heads)

    if len(outs) == 1:
        return outs[0], lses[0]
    inverse = torch.argsort(torch.tensor(order, device=q.device))
    return torch.cat(outs, 1)[:, inverse], torch.cat(lses, 1)[:, inverse]
