"""The "flex" backend: PyTorch's FlexAttention with a block-sparse band.

FlexAttention is a PyTorch-maintained kernel generator: a ``mask_mod`` says which
(query, key) pairs exist and a ``BlockMask`` says which tiles to visit at all. Here:

- **a dilated head costs what an undilated one does.** A ``(w, d)`` band is an undilated
  ``w`` band on each of the ``d`` residue classes ``i = r (mod d)`` (docs/design.md §1).
  So when a layer has dilated heads, each head's queries, keys and values are gathered
  into its :func:`~..band.residue_order` ("slots"), where its band is ``d`` undilated
  bands along the diagonal, and the output is gathered back. Visiting tiles of the
  dilated band in position order instead would touch ``d`` times the tiles and throw
  away ``(d - 1) / d`` of each. Heads with different dilations share one call: each has
  its own order;
- **the BlockMask's index tensors are built once per geometry** (length, window,
  dilations, causal, with or without key padding, device), by :func:`tile_lists`, in
  O(d (T / 128)^2) work (never T^2): the key tiles of each query tile for the forward and
  their transposes for the backward. A call, and every layer of it, only wraps them and
  its own ``mask_mod`` in a ``BlockMask``: no sort per call, where
  ``BlockMask.from_kv_blocks`` would sort to transpose the lists in every layer. A compiled
  layer gets them (a :class:`Geometry`) as inputs of its graph, built before it runs
  (:func:`prepare`);
- tiles that lie wholly inside one class's band are marked *full*, so FlexAttention
  skips the mask there. With key padding no tile is full (padded keys hide in any tile),
  so **a call without padding is a kind of its own**: its ``mask_mod`` reads no key
  tensor and its band tiles are full;
- ``mask_mod`` works in slots, read from tensors: the window and causality are a slot
  distance, a dilated head's pair must also share a residue class (a looked-up class per
  slot, not ``(j - i) % d``: an integer division per score would cost a partial tile more
  than its matrix product on a GPU), and key padding is read per key slot, as int32:
  every tensor the mask reads is 32-bit, because on a GPU a load of bytes there costs
  the whole forward 10x (6.7 ms against 0.66 at 64K tokens on an H200; bool and uint8
  alike);
- in rows that pack several documents, the mask also compares the query's and the key's
  document ids (int32, per slot like the key padding), and, as with padding, no tile is
  full: a boundary may cross any tile. Such calls are a kind of their own ("packed");
- the relative-position term becomes a ``score_mod`` that adds a ``(B, H, T, W)`` bias
  gathered by band column: memory O(T * W), like ``chunks`` (never T x T);
- FlexAttention returns the row log-sum-exp that the layer merges with global keys.

**Lengths: one compilation for a whole training run.** fairseq's batches bring a new
length at almost every step, and each layer may have its own window. A
``torch.compile``'d FlexAttention that saw these as constants would recompile for each,
and after torch's recompile limit run FlexAttention eagerly, which is dense (O(T^2)
memory). So the compiled function takes everything that varies as tensors (the window,
dilations, padding, the tile lists) and is compiled with dynamic shapes and
``fullgraph=True``: its variants are bounded by the kinds of call (grad mode, dtype, a
batch of one; with or without the position term, dilated heads and key padding, a
function each), not by lengths or windows. Inside, the ``T`` tokens are padded to
:func:`kernel_length`, two ways (:func:`length_mode`):

- ``"dynamic"`` (the default): the next multiple of 128, as a symbolic size that the
  compiler knows to be one, so FlexAttention's kernels are generated for divisible
  lengths (no bounds check on any tile, as with static shapes) while one compilation
  still serves every length. It costs a copy of q, k and v (fused with the gather into
  slot order for dilated heads) and at most 127 padded rows. The default because it
  keeps one compilation for every length; the GPU measurement against ``"buckets"``
  (``bench attention``'s ``flex-static``) decides.
- ``"buckets"``: the next of 128 x {1, 2, 3, 4, 6, 8, 12, ...} tokens (each at most 1.5x
  the one before), a constant of the compiled code: a compilation per bucket, static
  shapes in the kernels. Tiles of padding alone are never visited, so it costs copies,
  not attention. ``LONGFORMER_FS_FLEX_LENGTHS=buckets`` sets it for a process.

Hitting the recompile limit anyway raises inside torch instead of going dense, and the
backend raises :class:`~longformer_fs.attention.spec.BackendFailed` with why; so it does
when FlexAttention fails to compile for a call. It never hands a call to another
backend: ``auto`` records the failure and chooses again, a ``backend="flex"`` run stops.

FlexAttention computes in the input dtype with fp32 softmax statistics; the output is
returned in the input dtype. It has no attention dropout, and its GPU kernels need a
head dimension of at least 16 (:func:`limits`): asked for such a call, it refuses.

On CPU, this torch's compiled FlexAttention is inference-only and cannot return the
log-sum-exp, and FlexAttention has no CPU backward at all, so the backend runs the
same function uncompiled there (FlexAttention's dense reference path, O(T^2): for
tests of the masks, not for speed) and refuses gradients. ``auto`` never picks it on
CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

import torch
import torch.fx.experimental._config  # noqa: F401 (read by _compile_settings)
import torch.nn.functional as F
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention

from ... import devices
from .. import calls
from ..band import residue_length, residue_order
from ..spec import BackendFailed, BandOutput, BandSpec, PositionTerm, refusal

BLOCK = 128  # FlexAttention's default tile, queries and keys; its kernels drop bounds checks at multiples of it
MIN_GPU_HEAD_DIM = 16  # FlexAttention's GPU kernels need at least this


def unavailable_reason() -> str | None:
    return None


READS = frozenset({"dropout_p"})  # the BandSpec fields that limits() reads


def limits(spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None) -> list[str]:
    """Why FlexAttention cannot compute this call (empty: it can): dropout, or a head
    dimension under 16 on GPU."""
    reasons = []
    if spec is not None and spec.dropout_p:
        reasons.append("it has no attention dropout")
    if devices.on_gpu(device) and head_dim < MIN_GPU_HEAD_DIM:
        reasons.append(
            f"FlexAttention's GPU kernels need a head dimension of {MIN_GPU_HEAD_DIM} or more (this call: {head_dim})"
        )
    return reasons


# ------------------------------------------------------------------ lengths

LENGTH_MODES = ("dynamic", "buckets")
_length_mode = os.environ.get("LONGFORMER_FS_FLEX_LENGTHS", "dynamic")
if _length_mode not in LENGTH_MODES:
    raise ValueError(f"LONGFORMER_FS_FLEX_LENGTHS={_length_mode!r}: expected one of {', '.join(LENGTH_MODES)}")

# Bucket sizes in tiles: 1, 2, 3, 4, 6, 8, 12, ...: each at most 1.5x the one before, so a
# bucket pads at most half again the tiles; 36 buckets reach 2^18 tiles (33M tokens).
BUCKET_TILES = tuple(sorted({2**i for i in range(19)} | {3 * 2**i for i in range(17)}))
# In "buckets" mode one function compiles once per bucket, grad mode and batch of one:
# torch's default limit (8) would send a training run's later buckets to chunks.
BUCKETS_RECOMPILE_LIMIT = 4 * len(BUCKET_TILES)


def kernel_length(seq_len: int | torch.SymInt, static: bool = False) -> int | torch.SymInt:
    """The length FlexAttention computes on for ``seq_len`` tokens: a multiple of 128.

    Args:
        seq_len: ``T``, an int, or a ``torch.SymInt`` inside a compiled function.
        static: the next bucket of :data:`BUCKET_TILES` (``"buckets"`` mode) instead of the
            next multiple of 128.

    For a SymInt, the multiple of 128 is a symbolic expression (``128 * ceil(T / 128)``)
    that the compiler knows to be divisible without a guard; the bucket is a constant,
    picked by comparisons that dynamo turns into range guards on ``T`` (a compilation
    per bucket).
    """
    tiles = (seq_len + BLOCK - 1) // BLOCK
    if not static:
        return tiles * BLOCK
    for bucket in BUCKET_TILES:
        if tiles <= bucket:
            return bucket * BLOCK
    raise ValueError(f"flex: {seq_len} tokens exceed the largest length bucket ({BUCKET_TILES[-1] * BLOCK})")


def current_length_mode() -> str:
    """``"dynamic"`` or ``"buckets"``: how calls pad their length (module docstring)."""
    return _length_mode


@contextlib.contextmanager
def length_mode(mode: str) -> Iterator[None]:
    """Run the calls inside with ``mode`` (``"dynamic"`` or ``"buckets"``), e.g. to time one
    against the other. Each mode compiles functions of its own."""
    global _length_mode
    if mode not in LENGTH_MODES:
        raise ValueError(f"flex length mode {mode!r}: expected one of {', '.join(LENGTH_MODES)}")
    saved, _length_mode = _length_mode, mode
    try:
        yield
    finally:
        _length_mode = saved


# ------------------------------------------------------------------ geometry, cached


def band_tiles(
    seq_len: int,
    window: int,
    dilations: tuple[int, ...],
    causal: bool,
    padded: bool,
    block: int = BLOCK,
    length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ``block x block`` tiles of the ``(length, length)`` score matrix to visit, per
    head, in slot order.

    A head with dilation ``d`` is computed on its :func:`~..band.residue_order`: there
    its band is ``d`` undilated ``w`` bands on the diagonal, one per residue class, so it
    touches as many tiles as an undilated head (plus a few where classes meet inside a
    tile), not ``d`` times as many. For ``d = 1`` slots are positions.

    Args:
        seq_len: ``T``, the tokens; slots from ``T`` to ``length`` are padding.
        padded: whether the call has key padding (then no tile is full).
        length: what the kernel computes on (:func:`kernel_length`), a multiple of
            ``block``; by default ``T`` rounded up to one.

    Returns:
        ``partial`` and ``full``, ``(H, nb, nb)`` bool with ``nb = length / block``:
        ``partial`` tiles hold some band pairs and need the mask; ``full`` tiles hold only
        band pairs (one residue class on both sides, all keys before ``T``, never with
        padding). Tiles of padding alone are in neither.
    """
    length = length if length is not None else -(-seq_len // block) * block
    starts = torch.arange(0, length, block)
    ends = starts + block - 1  # inclusive
    # Rows past T are dropped after the call, so a tile's queries end at T - 1; its keys
    # do not: a key tile reaching past T holds padding and needs the mask.
    q_lo, q_hi = starts[:, None], torch.clamp(ends, max=seq_len - 1)[:, None]
    k_lo, k_hi = starts[None, :], ends[None, :]
    below, above = window, (0 if causal else window)  # reach in slots, before and after the query
    per_dilation = {}
    for d in set(dilations):
        touch = torch.zeros(len(starts), len(starts), dtype=torch.bool)
        inside = torch.zeros_like(touch)
        first = 0
        for r in range(min(d, seq_len)):  # residue class r holds slots [first, last]
            last = first + residue_length(seq_len, d, r) - 1
            qa, qb, ka, kb = q_lo.clamp(min=first), q_hi.clamp(max=last), k_lo.clamp(min=first), k_hi.clamp(max=last)
            touch |= (qa <= qb) & (ka <= kb) & (ka - qb <= above) & (kb - qa >= -below)
            if not padded:
                one_class = (q_lo >= first) & (q_hi <= last) & (k_lo >= first) & (k_hi <= last)
                inside |= one_class & (k_hi - q_lo <= above) & (k_lo - q_hi >= -below)
            first = last + 1
        inside &= touch  # not a tile of padded queries alone
        per_dilation[d] = (touch & ~inside, inside)
    # Always one list per head: a constant head count keeps the compiled function's shapes
    # the same for layers with and without mixed dilations.
    return tuple(torch.stack([per_dilation[d][i] for d in dilations]) for i in (0, 1))


def _indices(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H, nq, nk)`` bool -> FlexAttention's ``(1, H, nq)`` int32 counts and
    ``(1, H, nq, nk)`` int32 indices: the visited key tiles of each query tile first,
    ascending, then the others ascending (as ``BlockMask.from_kv_blocks`` orders them)."""
    counts = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts[None], order[None]


# Four (1, H, nb, nb) int32 index tensors an entry on the device: 0.2 MiB at 4K tokens and
# 12 heads, 48 MiB at 64K; an entry per training length of a run's recent steps.
@lru_cache(maxsize=32)
def tile_lists(
    seq_len: int,
    window: int,
    dilations: tuple[int, ...],
    causal: bool,
    padded: bool,
    device: str,
    length: int | None = None,
) -> tuple[torch.Tensor, ...]:
    """A ``BlockMask``'s eight index tensors for the band, in its constructor's order, on
    ``device``: ``kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices`` and
    their transposes ``q_num_blocks, q_indices, full_q_num_blocks, full_q_indices``,
    which FlexAttention's backward walks. Built here once per geometry (on the device, at
    the first call), so that no call sorts. Arguments as :func:`band_tiles`."""
    partial, full = (t.to(device) for t in band_tiles(seq_len, window, dilations, causal, padded, length=length))
    kv = (*_indices(partial), *_indices(full))
    q = (*_indices(partial.transpose(-1, -2)), *_indices(full.transpose(-1, -2)))
    return (*kv, *q)


@lru_cache(maxsize=256)
def band_reach(window: int, heads: int, causal: bool, device: str) -> torch.Tensor:
    """``(2, H)`` int32: each head's reach before the query and after it, in slots (for a
    dilated head, a slot step is ``d`` positions)."""
    return torch.tensor([[window] * heads, [0 if causal else window] * heads], dtype=torch.int32).to(device)


@lru_cache(maxsize=32)  # (3, H, T) int64 on the device, a few MiB at long T: fewer kept
def slot_order(seq_len: int, dilations: tuple[int, ...], device: str) -> torch.Tensor | None:
    """``(3, H, T)`` long: each head's position of every slot, slot of every position, and
    residue class of every slot (None when no head is dilated: slots are positions)."""
    if all(d == 1 for d in dilations):
        return None
    orders = {d: residue_order(seq_len, d) for d in set(dilations)}
    positions = torch.stack([orders[d] for d in dilations])
    residues = positions % torch.tensor(dilations).view(-1, 1)
    return torch.stack([positions, torch.argsort(positions, dim=-1), residues]).to(device)


@lru_cache(maxsize=32)
def slot_classes(seq_len: int, dilations: tuple[int, ...], device: str, length: int) -> torch.Tensor | None:
    """``(H, length)`` int32: the residue class of each head's slots, what the mask reads,
    and -1 for the slots from ``T`` to ``length``, which no query before ``T`` shares (None
    when no head is dilated)."""
    order = slot_order(seq_len, dilations, device)
    return None if order is None else F.pad(order[2].to(torch.int32), (0, length - seq_len), value=-1)


@lru_cache(maxsize=32)
def slot_positions(seq_len: int, dilations: tuple[int, ...], device: str, length: int) -> torch.Tensor | None:
    """``(H, length)`` long: each head's position of every slot, and ``T`` (a padded key) for
    the slots from ``T`` to ``length``; for reading key padding in slot order (None when no
    head is dilated)."""
    order = slot_order(seq_len, dilations, device)
    return None if order is None else F.pad(order[0], (0, length - seq_len), value=seq_len)


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs FlexAttention computes for one batch row: the tiles of :func:`band_tiles`,
    summed over heads, times the tile size."""
    partial, full = band_tiles(seq_len, spec.window, spec.dilations, spec.causal, padded=False)
    return int(partial.sum() + full.sum()) * BLOCK * BLOCK


# ------------------------------------------------------------------ the compiled function


def _block_mask(key_ok, reach, tiles, classes, seq_len, length, doc_ids=None) -> BlockMask:
    """The band's ``BlockMask`` over ``length`` slots, from the cached ``tiles``
    (:func:`tile_lists`): no sort, no tensor work.

    Args:
        key_ok, reach, tiles, classes, doc_ids: as :func:`call_inputs` returns them.
        seq_len, length: ``T`` and :func:`kernel_length` (ints, or SymInts when compiled).

    Every tensor the mask reads is an input of the compiled function (or a view of one),
    not computed inside it: compiled CPU FlexAttention cannot read a computed one.
    """
    before, after = reach[0], reach[1]
    per_head = key_ok is not None and key_ok.dim() == 3
    docs_per_head = doc_ids is not None and doc_ids.dim() == 3

    def mask_mod(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx
        ok = (offset >= -before[h]) & (offset <= after[h])
        if classes is not None:  # also drops the slots past T
            ok = ok & (classes[h, q_idx] == classes[h, kv_idx])
        if key_ok is not None:  # also drops the slots past T
            ok = ok & ((key_ok[b, h, kv_idx] if per_head else key_ok[b, kv_idx]) != 0)
        elif classes is None:  # the slots past T by a compare: no load
            ok = ok & (kv_idx < seq_len)
        if doc_ids is not None:  # packed rows: the key's document is the query's
            if docs_per_head:
                ok = ok & (doc_ids[b, h, q_idx] == doc_ids[b, h, kv_idx])
            else:
                ok = ok & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])
        return ok

    # FlexAttention's own constructor: from_kv_blocks would sort to transpose the lists.
    return BlockMask((length, length), *tiles, BLOCK_SIZE=(BLOCK, BLOCK), mask_mod=mask_mod)


@dataclass(frozen=True)
class Geometry:
    """What a call reads besides its tensors and key mask, for one length, window, dilations,
    causality, padding (or not) and device: cached (:func:`geometry`), so that no call builds it.

    A compiled layer takes it as an input, built before its graph runs (:func:`prepare`): traced
    inside, it would be rebuilt, on the host and copied in, at every call.

    Attributes:
        reach: :func:`band_reach`.
        tiles: :func:`tile_lists`.
        order: :func:`slot_order` (None: no head is dilated).
        classes: :func:`slot_classes` (None likewise).
        positions: :func:`slot_positions` (None likewise).
    """

    reach: torch.Tensor
    tiles: tuple[torch.Tensor, ...]
    order: torch.Tensor | None
    classes: torch.Tensor | None
    positions: torch.Tensor | None


def geometry(seq_len: int, spec: BandSpec, padded: bool, device: str, static: bool = False) -> Geometry:
    """The :class:`Geometry` of a call on ``seq_len`` tokens (each piece cached on its own)."""
    length = kernel_length(seq_len, static)
    return Geometry(
        band_reach(spec.window, len(spec.dilations), spec.causal, device),
        tile_lists(seq_len, spec.window, spec.dilations, spec.causal, padded, device, length),
        slot_order(seq_len, spec.dilations, device),
        slot_classes(seq_len, spec.dilations, device, length),
        slot_positions(seq_len, spec.dilations, device, length),
    )


def prepare(seq_len: int, spec: BandSpec, padded: bool, device: torch.device) -> Geometry:
    """The backend's ``prepare``: what a call of this kind will read, built now (outside a
    compiled region) and handed to it as ``prepared``. Packed rows mask inside any tile, as
    padding does."""
    return geometry(seq_len, spec, padded or spec.packed, str(device), _length_mode == "buckets")


def call_inputs(
    q: torch.Tensor,
    key_mask: torch.Tensor | None,
    spec: BandSpec,
    static: bool = False,
    prepared: Geometry | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor | None, torch.Tensor | None]:
    """The arguments a call passes besides ``q, k, v``, the position term and the scale,
    for ``q`` ``(B, H, T, D)`` and ``key_mask`` ``(B, T)`` (True: padding) or None:
    ``(key_ok, reach, tiles, order, classes)``.

    - ``key_ok``: None without ``key_mask``; else int32 (every tensor the mask reads is
      32-bit: a byte load there costs the forward 10x on a GPU), nonzero for keys that may
      be attended, 0 for the slots past ``T``: ``(B, length)`` by position, or
      ``(B, H, length)`` in each head's slot order when a head is dilated. The one tensor
      made per call.
    - ``reach``, ``tiles``, ``order``, ``classes``: the call's :class:`Geometry`, ``prepared``
      or the cached one.

    ``length`` is :func:`kernel_length` (``static``: a length bucket).
    """
    seq_len = q.shape[2]
    length = kernel_length(seq_len, static)
    found = prepared or geometry(seq_len, spec, key_mask is not None or spec.packed, str(q.device), static)
    key_ok = None
    if key_mask is not None:
        key_ok = F.pad(~key_mask, (0, length - seq_len)).to(torch.int32)
        if found.positions is not None:  # the mask then reads each key slot's entry, not through the order
            key_ok = key_ok[:, found.positions]
    return key_ok, found.reach, found.tiles, found.order, found.classes


def document_slots(
    documents: torch.Tensor, seq_len: int, spec: BandSpec, static: bool = False, prepared: Geometry | None = None
) -> torch.Tensor:
    """The document ids ``(B, T)`` of packed rows as ``mask_mod`` reads them: int32, padded to
    :func:`kernel_length` with -1, ``(B, length)`` by position or ``(B, H, length)`` in each
    head's slot order when a head is dilated (as ``key_ok``). ``prepared``: the call's
    :class:`Geometry`, whose slot positions a compiled layer then reads instead of the cache."""
    length = kernel_length(seq_len, static)
    ids = F.pad(documents.to(torch.int32), (0, length - seq_len), value=-1)
    if prepared is not None:
        positions = prepared.positions
    else:
        positions = slot_positions(seq_len, spec.dilations, str(documents.device), length)
    return ids if positions is None else ids[:, positions]


def band_block_mask(q: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec, static: bool = False) -> BlockMask:
    """The ``BlockMask`` the backend builds for a call on ``q`` ``(B, H, T, D)``, from the
    same inputs (:func:`call_inputs`). Its indices are slots of each head's
    :func:`slot_order` (positions when no head is dilated), over :func:`kernel_length`."""
    key_ok, reach, tiles, _, classes = call_inputs(q, key_mask, spec, static)
    seq_len = q.shape[2]
    return _block_mask(key_ok, reach, tiles, classes, seq_len, kernel_length(seq_len, static))


def _gather_heads(x, index):
    """``x`` ``(B, H, T, *rest)`` reordered along T by each head's ``index`` ``(H, T)``."""
    index = index.view(1, *index.shape, *([1] * (x.dim() - 3)))
    return x.gather(2, index.expand(x.shape[0], *index.shape[1:3], *x.shape[3:]))


class _Reorder(torch.autograd.Function):
    """:func:`_gather_heads` by a permutation, whose gradient is the gather by its inverse.

    Autograd's own gradient of a gather is a scatter-add into zeros (atomics on CUDA), as
    it must be for an index that may repeat; a permutation never repeats.
    """

    @staticmethod
    def forward(x, index, inverse):
        return _gather_heads(x, index)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[2])

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return _gather_heads(grad, inverse), None, None


def reorder(x, order, back: bool = False):
    """``x`` ``(B, H, T, *rest)`` into each head's slot order (``order`` from :func:`slot_order`),
    or back from it."""
    there, inverse = (order[1], order[0]) if back else (order[0], order[1])
    return _Reorder.apply(x, there, inverse)


def _attend(q, k, v, key_ok, reach, tiles, order, classes, pos_query, table, scale, static, lse=True, doc_ids=None):
    """Band attention from tensors only: ``(out (B, H, T, D), lse (B, H, T))``, or ``(out,)``
    without ``lse`` (all compiled CPU FlexAttention can return).

    With ``order`` (:func:`slot_order`), every head is computed on its own slot order and
    put back: a dilated head costs an undilated one's tiles plus a gather of each input
    and output (and the same in the backward, by the inverse order). The slots are
    padded to :func:`kernel_length` (``static``: a bucket) and the padding dropped from
    the results; tiles of padding alone are in no list, so never visited.
    """
    seq_len = q.shape[2]
    length = kernel_length(seq_len, static)
    if order is not None:
        q, k, v = (reorder(x, order) for x in (q, k, v))
        if pos_query is not None:
            pos_query = reorder(pos_query, order)
    # Each by its own size: after a reorder that is the order's, which a compiled function
    # sees as a size of its own, and the padded size is then length, exactly.
    q, k, v = (F.pad(x, (0, 0, 0, length - x.shape[2])) for x in (q, k, v))
    score_mod = None
    if pos_query is not None:
        pos_query = F.pad(pos_query, (0, 0, 0, length - pos_query.shape[2]))
        # Scaled through the small table: the bias is then the product's own output, which
        # every FlexAttention lowering can read (compiled CPU FlexAttention reads no computed one).
        bias = torch.einsum("bhid,hcd->bhic", pos_query, (table * scale).to(pos_query.dtype))
        before, width = reach[0], bias.shape[-1]

        def score_mod(score, b, h, q_idx, kv_idx):
            # In slots, the key of band column c is c - w slots from the query, dilated or not.
            column = torch.clamp(kv_idx - q_idx + before[h], 0, width - 1)
            return score + bias[b, h, q_idx, column]

    block_mask = _block_mask(key_ok, reach, tiles, classes, seq_len, length, doc_ids)
    if lse:
        out, aux = flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
        )
        result = (out, aux.lse)
    else:
        result = (flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale),)
    result = tuple(x[:, :, :seq_len] for x in result)
    if order is not None:
        result = tuple(reorder(x, order, back=True) for x in result)
    return result


def _band_call(q, k, v, key_ok, reach, tiles, order, classes, pos_query, table, scale, static, doc_ids=None):
    """:func:`_attend` with the log-sum-exp: what every kind of call compiles (:func:`kind_function`)."""
    return _attend(q, k, v, key_ok, reach, tiles, order, classes, pos_query, table, scale, static, doc_ids=doc_ids)


@lru_cache(maxsize=None)
def kind_function(kind: str) -> Callable:
    """:func:`_band_call` under a code object of its own, named after ``kind`` (e.g.
    ``"relative dilated padded"``).

    Dynamo keeps its compilations and its recompile budget per code object. One per kind
    of call (with or without the position term, dilated heads, key padding; each length
    mode) means a model with several kinds does not spend one kind's budget on another,
    and a kind without padding has compiled code without the key read.
    """
    name = "band_" + kind.replace(" ", "_")
    names = {"co_name": name} | ({"co_qualname": name} if sys.version_info >= (3, 11) else {})
    code = _band_call.__code__.replace(**names)
    fn = types.FunctionType(code, _band_call.__globals__, name)
    fn.__doc__ = _band_call.__doc__
    return fn


def band_forward(q, k, v, key_ok, reach, tiles, order, classes, scale, static=False):
    """The output alone (``order``, ``classes`` may be None): what compiled CPU FlexAttention
    can run, for benchmarks and tests of the compiled kernel on CPU. Arguments after
    ``v``: :func:`call_inputs`."""
    return _attend(q, k, v, key_ok, reach, tiles, order, classes, None, None, scale, static, lse=False)[0]


@lru_cache(maxsize=None)
def compiled(fn, backend="inductor"):
    """``fn`` compiled once per process and compiler backend; each kind of call has its own
    function, so its own recompile budget."""
    return torch.compile(fn, backend=backend, dynamic=True, fullgraph=True)


def _runner(fn, device: torch.device):
    """What runs ``fn`` on ``device``: compiled on a GPU (by :func:`~longformer_fs.devices.compiler`);
    FlexAttention's eager path elsewhere."""
    return compiled(fn, devices.compiler(device)) if devices.on_gpu(device) else fn


@contextlib.contextmanager
def _compile_settings(static: bool = False):
    """Settings that a compilation of ours, if this call triggers one, runs under.

    - The recompile limit raises instead of running FlexAttention eagerly (dense).
    - With ``static`` (``"buckets"`` mode), that limit is :data:`BUCKETS_RECOMPILE_LIMIT`
      at least: a compilation per bucket is the point there.
    - No "duck sizing": torch gives sizes that are equal once (a batch of 12 and 12
      heads) one symbol and specialises both when it specialises one, which would
      recompile for each new batch size. Here every size gets its own symbol.

    Set and restored by hand: ``config.patch`` costs ~130 us a call, this ~8.
    """
    dynamo, fx = torch._dynamo.config, torch.fx.experimental._config
    saved = dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape, dynamo.recompile_limit
    dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape = True, False
    if static:
        dynamo.recompile_limit = max(saved[2], BUCKETS_RECOMPILE_LIMIT)
    try:
        yield
    finally:
        dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape, dynamo.recompile_limit = saved


# ------------------------------------------------------------------ the backend


def flex_band_attention(
    q,
    k,
    v,
    key_mask,
    spec: BandSpec,
    position: PositionTerm | None = None,
    documents: torch.Tensor | None = None,
    prepared: Geometry | None = None,
) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`; ``prepared``: the
    call's :class:`Geometry`, built by :func:`prepare` before a compiled layer's graph."""
    reasons = limits(spec, q.device, q.shape[-1], q.dtype)
    if reasons:
        raise ValueError(refusal("flex", reasons))
    static = _length_mode == "buckets"
    # A kind per compiled function: one kind's failure leaves the others compiled.
    kind = (
        ("relative" if position is not None else "plain")
        + (" dilated" if max(spec.dilations) > 1 else "")
        + (" padded" if key_mask is not None else "")
        + (" packed" if documents is not None else "")
        + (" buckets" if static else "")
    )
    inputs = (q, k, v) if position is None else (q, k, v, position.query, position.table)
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
        raise ValueError(
            refusal("flex", [f"it has no backward on CPU in torch {torch.__version__} (a FlexAttention limit)"])
            + "; train on CPU with backend='kernel' or 'chunks'"
        )
    args = (
        *call_inputs(q, key_mask, spec, static, prepared),
        *((None, None) if position is None else (position.query, position.table)),
        spec.scale,
        static,
        None if documents is None else document_slots(documents, q.shape[2], spec, static, prepared),
    )
    if torch.compiler.is_compiling():
        # Inside the caller's own compiled graph: traced there, whole. (The function of each
        # kind exists for the budgets of the ones compiled here; building it, a code object's
        # replace, is a graph break for dynamo.)
        return _band_call(q, k, v, *args)
    fn = kind_function(kind)
    # On CPU the eager path is chosen on purpose (see the module docstring): silence torch's
    # advice to compile there only, keeping the per-call cost off the GPU path.
    eager = not devices.on_gpu(q.device)
    quiet = warnings.catch_warnings() if eager else contextlib.nullcontext()
    try:
        with quiet, _compile_settings(static):
            if eager:
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            result = _runner(fn, q.device)(q, k, v, *args)
        calls.record("flex", spec)
        return result
    except torch._dynamo.exc.FailOnRecompileLimitHit as err:
        reason = f"torch's recompile limit was reached, and eager FlexAttention would be dense ({err})"
        raise BackendFailed(f"backend 'flex' failed on {kind} calls: {reason}") from err
    except torch._dynamo.exc.BackendCompilerFailed as err:  # e.g. a head size FlexAttention cannot tile
        cause = getattr(err, "inner_exception", None) or err
        reason = f"compiling FlexAttention failed: {type(cause).__name__}: {str(cause).splitlines()[0][:300]}"
        raise BackendFailed(f"backend 'flex' failed on {kind} calls: {reason}") from err
