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
- the tiles come from that geometry, per head, in O(d (T / 128)^2) work (never T^2),
  cached per shape. Tiles that lie wholly inside one class's band are marked *full*, so
  FlexAttention skips the mask there; with padding no tile is full, since padded keys
  hide in any tile;
- ``mask_mod`` works in slots, read from tensors: the window and causality are a slot
  distance, a dilated head's pair must also share a residue class (a looked-up class per
  slot, not ``(j - i) % d``: an integer division per score would cost a partial tile more
  than its matrix product on a GPU), and key padding is read at the key's position, as
  int32: every tensor the mask reads is 32-bit, because on a GPU a load of bytes there
  costs the whole forward 10x (6.7 ms against 0.66 at 64K tokens on an H200; bool and
  uint8 alike);
- the relative-position term becomes a ``score_mod`` that adds a ``(B, H, T, W)`` bias
  gathered by band column: memory O(T * W), like ``chunks`` (never T x T);
- FlexAttention returns the row log-sum-exp that the layer merges with global keys.

**One compilation for a whole training run.** fairseq's batches bring a new length at
almost every step, and each layer may have its own window. A ``torch.compile``'d
FlexAttention that saw these as constants would recompile for each, and after torch's
recompile limit run FlexAttention eagerly, which is dense (O(T^2) memory). So the
compiled function takes everything that varies as tensors (the window, dilations,
padding, the tile lists) and is compiled with dynamic shapes and ``fullgraph=True``:
its variants are bounded by the kinds of call (grad mode, dtype, a batch of one; with or
without the position term and dilated heads, a function each), not by lengths or
windows. Hitting the recompile limit anyway raises inside torch instead of going dense,
and the backend then hands the call to ``chunks`` and logs why; so it does when
FlexAttention fails to compile for a call.

FlexAttention computes in the input dtype with fp32 softmax statistics; the output is
returned in the input dtype. It has no attention dropout, and its GPU kernels need a
head dimension of at least 16: such calls go to ``chunks``, logged once.

On CPU, this torch's compiled FlexAttention is inference-only and cannot return the
log-sum-exp, and FlexAttention has no CPU backward at all, so the backend runs the
same function uncompiled there (FlexAttention's dense reference path, O(T^2): for
tests of the masks, not for speed) and refuses gradients. ``auto`` never picks it on
CPU.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from functools import lru_cache

import torch
import torch.fx.experimental._config  # noqa: F401 (read by _compile_settings)
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention

from ..band import residue_length, residue_order
from ..spec import BandOutput, BandSpec, PositionTerm
from .chunks import chunks_band_attention

logger = logging.getLogger(__name__)

BLOCK = 128  # FlexAttention's default tile, queries and keys
MIN_GPU_HEAD_DIM = 16  # FlexAttention's GPU kernels need at least this


def unavailable_reason() -> str | None:
    return None


def limitation(spec: BandSpec, device: torch.device, head_dim: int) -> str | None:
    """Why FlexAttention cannot compute this call: dropout, or a head dimension under 16 on GPU."""
    if spec.dropout_p:
        return "it cannot compute this call (attention dropout)"
    if device.type == "cuda" and head_dim < MIN_GPU_HEAD_DIM:
        return (
            f"FlexAttention's GPU kernels need a head dimension of {MIN_GPU_HEAD_DIM} or more (this call: {head_dim})"
        )
    return None


# ------------------------------------------------------------------ geometry, cached


def band_tiles(
    seq_len: int, window: int, dilations: tuple[int, ...], causal: bool, padded: bool, block: int = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ``block x block`` tiles of the ``(T, T)`` score matrix to visit, per head, in
    slot order.

    A head with dilation ``d`` is computed on its :func:`~..band.residue_order`: there
    its band is ``d`` undilated ``w`` bands on the diagonal, one per residue class, so it
    touches as many tiles as an undilated head (plus a few where classes meet inside a
    tile), not ``d`` times as many. For ``d = 1`` slots are positions.

    Returns:
        ``partial`` and ``full``, ``(H, nb, nb)`` bool with ``nb = ceil(T / block)``:
        ``partial`` tiles hold some band pairs and need the mask; ``full`` tiles hold only
        band pairs (one residue class on both sides, never with padding).
    """
    starts = torch.arange(0, seq_len, block)
    ends = torch.clamp(starts + block, max=seq_len) - 1  # inclusive
    q_lo, q_hi, k_lo, k_hi = starts[:, None], ends[:, None], starts[None, :], ends[None, :]
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
        per_dilation[d] = (touch & ~inside, inside)
    # Always one list per head: a constant head count keeps the compiled function's shapes
    # the same for layers with and without mixed dilations.
    return tuple(torch.stack([per_dilation[d][i] for d in dilations]) for i in (0, 1))


def _indices(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H, nq, nk)`` bool -> FlexAttention's ``(1, H, nq)`` counts and ``(1, H, nq, nk)``
    indices (the visited key tiles of each query tile first, ascending)."""
    counts = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts[None], order[None]


@lru_cache(maxsize=64)  # (H, T/128, T/128) int32 twice on the device: ~6 MiB an entry at 32K tokens
def tile_lists(seq_len: int, window: int, dilations: tuple[int, ...], causal: bool, padded: bool, device: str):
    """``(kv_num, kv_idx, full_num, full_idx)`` on ``device``, for ``BlockMask.from_kv_blocks``."""
    partial, full = band_tiles(seq_len, window, dilations, causal, padded)
    return tuple(t.to(device) for t in (*_indices(partial), *_indices(full)))


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


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs FlexAttention computes for one batch row: the tiles of :func:`band_tiles`,
    summed over heads, times the tile size."""
    partial, full = band_tiles(seq_len, spec.window, spec.dilations, spec.causal, padded=False)
    return int(partial.sum() + full.sum()) * BLOCK * BLOCK


# ------------------------------------------------------------------ the compiled function


def _band_block_mask(key_ok, reach, tiles, seq_len, order=None) -> BlockMask:
    """The band's ``BlockMask`` over slots: with ``order`` (:func:`slot_order`), each head's
    own; ``key_ok`` ``(B, T)`` int32, nonzero for keys that may be attended, is by position."""
    before, after = reach[0], reach[1]

    def mask_mod(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx
        inside = (offset >= -before[h]) & (offset <= after[h])
        if order is None:
            return inside & (key_ok[b, kv_idx] != 0)
        return inside & (order[2, h, q_idx] == order[2, h, kv_idx]) & (key_ok[b, order[0, h, kv_idx]] != 0)

    return BlockMask.from_kv_blocks(*tiles, BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(seq_len, seq_len))


def band_block_mask(q: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec) -> BlockMask:
    """The ``BlockMask`` the backend builds for a call on ``q`` ``(B, H, T, D)``, from the
    same inputs (:func:`call_inputs`). Its indices are slots of each head's
    :func:`slot_order` (positions when no head is dilated)."""
    key_ok, reach, tiles, order = call_inputs(q, key_mask, spec)
    return _band_block_mask(key_ok, reach, tiles, q.shape[2], order)


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


def _attend(q, k, v, key_ok, reach, tiles, scale, order=None, pos_query=None, table=None, lse=True):
    """Band attention from tensors only: ``(out (B, H, T, D), lse (B, H, T))``, or ``(out,)``
    without ``lse`` (all compiled CPU FlexAttention can return).

    With ``order`` (:func:`slot_order`), every head is computed on its own slot order and
    put back: a dilated head costs an undilated one's tiles plus a gather of each input
    and output (and the same in the backward, by the inverse order).
    """
    if order is not None:
        q, k, v = (reorder(x, order) for x in (q, k, v))
        if pos_query is not None:
            pos_query = reorder(pos_query, order)
    score_mod = None
    if pos_query is not None:
        bias = torch.einsum("bhid,hcd->bhic", pos_query, table.to(pos_query.dtype)) * scale
        before, width = reach[0], bias.shape[-1]

        def score_mod(score, b, h, q_idx, kv_idx):
            # In slots, the key of band column c is c - w slots from the query, dilated or not.
            column = torch.clamp(kv_idx - q_idx + before[h], 0, width - 1)
            return score + bias[b, h, q_idx, column]

    block_mask = _band_block_mask(key_ok, reach, tiles, q.shape[2], order)
    if lse:
        out, aux = flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
        )
        result = (out, aux.lse)
    else:
        result = (flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale),)
    if order is not None:
        result = tuple(reorder(x, order, back=True) for x in result)
    return result


# One function per kind of call: each is its own code object, so torch.compile gives each
# its own cache and recompile budget, and a model with dilated and undilated layers does
# not spend one kind's budget on the other.


def band_plain(q, k, v, key_ok, reach, tiles, scale):
    """:func:`_attend` with no dilated head and no position term."""
    return _attend(q, k, v, key_ok, reach, tiles, scale)


def band_relative(q, k, v, key_ok, reach, tiles, pos_query, table, scale):
    """:func:`band_plain` plus the position term, gathered from a ``(B, H, T, W)`` bias."""
    return _attend(q, k, v, key_ok, reach, tiles, scale, pos_query=pos_query, table=table)


def band_plain_dilated(q, k, v, key_ok, reach, tiles, order, scale):
    """:func:`band_plain` with dilated heads, each on its slot order."""
    return _attend(q, k, v, key_ok, reach, tiles, scale, order)


def band_relative_dilated(q, k, v, key_ok, reach, tiles, order, pos_query, table, scale):
    """:func:`band_relative` with dilated heads, each on its slot order."""
    return _attend(q, k, v, key_ok, reach, tiles, scale, order, pos_query, table)


def band_forward(q, k, v, key_ok, reach, tiles, order, scale):
    """The output alone (``order`` may be None): what compiled CPU FlexAttention can run,
    for benchmarks and tests of the compiled kernel on CPU."""
    return _attend(q, k, v, key_ok, reach, tiles, scale, order, lse=False)[0]


def call_inputs(q: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec):
    """The tensors a call passes besides ``q, k, v``: ``(key_ok, reach, tiles, order)``."""
    batch, _, seq_len, _ = q.shape
    device = str(q.device)
    key_ok = torch.ones(batch, seq_len, dtype=torch.int32, device=q.device) if key_mask is None else (~key_mask).int()
    reach = band_reach(spec.window, len(spec.dilations), spec.causal, device)
    tiles = tile_lists(seq_len, spec.window, spec.dilations, spec.causal, key_mask is not None, device)
    return key_ok, reach, tiles, slot_order(seq_len, spec.dilations, device)


@lru_cache(maxsize=None)
def compiled(fn, backend="inductor"):
    """``fn`` compiled once per process and compiler backend; each kind of call has its own
    function, so its own recompile budget."""
    return torch.compile(fn, backend=backend, dynamic=True, fullgraph=True)


def _runner(fn, device: torch.device):
    """What runs ``fn`` on ``device``: compiled on GPU; FlexAttention's eager path elsewhere."""
    return compiled(fn) if device.type == "cuda" else fn


@contextlib.contextmanager
def _compile_settings():
    """Settings that a compilation of ours, if this call triggers one, runs under.

    - The recompile limit raises instead of running FlexAttention eagerly (dense).
    - No "duck sizing": torch gives sizes that are equal once (a batch of 12 and 12
      heads) one symbol and specialises both when it specialises one, which would
      recompile for each new batch size. Here every size gets its own symbol.

    Set and restored by hand: ``config.patch`` costs ~130 us a call, this ~8.
    """
    dynamo, fx = torch._dynamo.config, torch.fx.experimental._config
    saved = dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape
    dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape = True, False
    try:
        yield
    finally:
        dynamo.fail_on_recompile_limit_hit, fx.use_duck_shape = saved


# ------------------------------------------------------------------ the backend

_FALLBACKS: dict[str, str] = {}  # why calls of a kind went to chunks, logged once each


def _fall_back(kind: str, reason: str, q, k, v, key_mask, spec, position):
    if kind not in _FALLBACKS:
        _FALLBACKS[kind] = reason
        logger.warning("attention backend flex -> chunks for %s calls: %s", kind, reason)
    return chunks_band_attention(q, k, v, key_mask, spec, position)


def flex_band_attention(q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None = None) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`."""
    if spec.dropout_p:
        raise ValueError("backend: 'flex' has no attention dropout; use backend='auto' or 'chunks'")
    # A kind per compiled function: one kind's fallback leaves the others compiled.
    kind = ("relative" if position is not None else "plain") + (" dilated" if max(spec.dilations) > 1 else "")
    why_not = limitation(spec, q.device, q.shape[-1])
    if why_not is not None:
        return _fall_back(f"{kind} D={q.shape[-1]}", why_not, q, k, v, key_mask, spec, position)
    if kind in _FALLBACKS:
        return _fall_back(kind, _FALLBACKS[kind], q, k, v, key_mask, spec, position)
    inputs = (q, k, v) if position is None else (q, k, v, position.query, position.table)
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
        raise ValueError(
            f"backend: 'flex' has no backward on CPU in torch {torch.__version__} (a FlexAttention "
            "limit); train on CPU with backend='kernel' or 'chunks'"
        )
    key_ok, reach, tiles, order = call_inputs(q, key_mask, spec)
    if order is None:
        fn, args = (band_plain, ()) if position is None else (band_relative, (position.query, position.table))
    elif position is None:
        fn, args = band_plain_dilated, (order,)
    else:
        fn, args = band_relative_dilated, (order, position.query, position.table)
    if torch.compiler.is_compiling():  # inside the caller's own compiled graph: traced there
        return fn(q, k, v, key_ok, reach, tiles, *args, spec.scale)
    # On CPU the eager path is chosen on purpose (see the module docstring): silence torch's
    # advice to compile there only, keeping the per-call cost off the GPU path.
    quiet = warnings.catch_warnings() if q.device.type != "cuda" else contextlib.nullcontext()
    try:
        with quiet, _compile_settings():
            if q.device.type != "cuda":
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return _runner(fn, q.device)(q, k, v, key_ok, reach, tiles, *args, spec.scale)
    except torch._dynamo.exc.FailOnRecompileLimitHit as err:
        reason = f"torch's recompile limit was reached, and eager FlexAttention would be dense ({err})"
        return _fall_back(kind, reason, q, k, v, key_mask, spec, position)
    except torch._dynamo.exc.BackendCompilerFailed as err:  # e.g. a head size FlexAttention cannot tile
        cause = getattr(err, "inner_exception", None) or err
        reason = f"compiling FlexAttention failed: {type(cause).__name__}: {str(cause).splitlines()[0][:300]}"
        return _fall_back(kind, reason, q, k, v, key_mask, spec, position)
