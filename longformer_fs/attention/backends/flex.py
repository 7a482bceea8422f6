"""The "flex" backend: PyTorch's FlexAttention with a block-sparse band.

FlexAttention is a PyTorch-maintained kernel generator: a ``mask_mod`` says which
(query, key) pairs exist and a ``BlockMask`` says which tiles to visit at all. Here:

- the tiles come from the band's geometry, per head, in O((T / 128)^2) work (never
  T^2), cached per shape. Tiles that lie wholly inside an undilated band are marked
  *full*, so FlexAttention skips the mask there; with padding no tile is full, since
  padded keys hide in any tile;
- ``mask_mod`` adds dilation (``(j - i) % d == 0``), the window, causality and key
  padding, all read from tensors;
- the relative-position term becomes a ``score_mod`` that adds a ``(B, H, T, W)`` bias
  gathered by band column: memory O(T * W), like ``chunks`` (never T x T);
- FlexAttention returns the row log-sum-exp that the layer merges with global keys.

**One compilation for a whole training run.** fairseq's batches bring a new length at
almost every step, and each layer may have its own window. A ``torch.compile``'d
FlexAttention that saw these as constants would recompile for each, and after torch's
recompile limit run FlexAttention eagerly, which is dense (O(T^2) memory). So the
compiled function takes everything that varies as tensors (the window, dilations,
padding, the tile lists) and is compiled with dynamic shapes and ``fullgraph=True``:
its variants are bounded by the kinds of call (grad mode, dtype, a batch of one), not
by lengths or windows. Hitting the recompile limit anyway raises inside torch instead
of going dense, and the backend then hands the call to ``chunks`` and logs why; so it
does when FlexAttention fails to compile for a call.

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
    """Which ``block x block`` tiles of the ``(T, T)`` score matrix to visit, per head.

    Returns:
        ``partial`` and ``full``, ``(H, nb, nb)`` bool with ``nb = ceil(T / block)``:
        ``partial`` tiles hold some band pairs and need the mask; ``full`` tiles hold only
        band pairs (never with dilation or padding).
    """
    starts = torch.arange(0, seq_len, block)
    ends = torch.clamp(starts + block, max=seq_len) - 1  # inclusive
    q_lo, q_hi, k_lo, k_hi = starts[:, None], ends[:, None], starts[None, :], ends[None, :]
    per_dilation = {}
    for d in set(dilations):
        below, above = window * d, (0 if causal else window * d)  # reach before and after the query
        touch = (k_lo <= q_hi + above) & (k_hi >= q_lo - below)
        inside = (k_hi - q_lo <= above) & (k_lo - q_hi >= -below) if d == 1 and not padded else torch.zeros_like(touch)
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


@lru_cache(maxsize=256)
def tile_lists(seq_len: int, window: int, dilations: tuple[int, ...], causal: bool, padded: bool, device: str):
    """``(kv_num, kv_idx, full_num, full_idx)`` on ``device``, for ``BlockMask.from_kv_blocks``."""
    partial, full = band_tiles(seq_len, window, dilations, causal, padded)
    return tuple(t.to(device) for t in (*_indices(partial), *_indices(full)))


@lru_cache(maxsize=256)
def band_geometry(window: int, dilations: tuple[int, ...], causal: bool, device: str) -> torch.Tensor:
    """``(3, H)`` int32: each head's dilation, reach before the query and reach after it."""
    d = torch.tensor(dilations, dtype=torch.int32)
    return torch.stack([d, window * d, d * (0 if causal else window)]).to(device)


# ------------------------------------------------------------------ the compiled function


def _band_block_mask(key_ok, geometry, tiles, seq_len) -> BlockMask:
    dilation, before, after = geometry[0], geometry[1], geometry[2]

    def mask_mod(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx
        d = dilation[h]
        return (offset % d == 0) & (offset >= -before[h]) & (offset <= after[h]) & key_ok[b, kv_idx]

    return BlockMask.from_kv_blocks(*tiles, BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(seq_len, seq_len))


def band_block_mask(seq_len: int, spec: BandSpec, key_ok: torch.Tensor | None, device: torch.device) -> BlockMask:
    """The ``BlockMask`` of a call as the backend builds it; ``key_ok`` ``(B, T)`` bool or None."""
    padded = key_ok is not None
    if not padded:
        key_ok = torch.ones(1, seq_len, dtype=torch.bool, device=device)
    geometry = band_geometry(spec.window, spec.dilations, spec.causal, str(device))
    tiles = tile_lists(seq_len, spec.window, spec.dilations, spec.causal, padded, str(device))
    return _band_block_mask(key_ok, geometry, tiles, seq_len)


def _flex(q, k, v, block_mask, score_mod, scale):
    out, aux = flex_attention(
        q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
    )
    return out, aux.lse


def band_plain(q, k, v, key_ok, geometry, tiles, scale):
    """Band attention from tensors only: ``(out (B, H, T, D), lse (B, H, T))``."""
    return _flex(q, k, v, _band_block_mask(key_ok, geometry, tiles, q.shape[2]), None, scale)


def band_relative(q, k, v, key_ok, geometry, tiles, pos_query, table, scale):
    """:func:`band_plain` plus the position term, gathered from a ``(B, H, T, W)`` bias."""
    bias = torch.einsum("bhid,hcd->bhic", pos_query, table.to(pos_query.dtype)) * scale
    dilation, before = geometry[0], geometry[1]
    width = bias.shape[-1]

    def score_mod(score, b, h, q_idx, kv_idx):
        d = dilation[h]
        column = torch.clamp(torch.div(kv_idx - q_idx, d, rounding_mode="floor") + before[h] // d, 0, width - 1)
        return score + bias[b, h, q_idx, column]

    return _flex(q, k, v, _band_block_mask(key_ok, geometry, tiles, q.shape[2]), score_mod, scale)


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
    kind = "relative" if position is not None else "plain"
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
    batch, _, seq_len, _ = q.shape
    device = str(q.device)
    key_ok = torch.ones(batch, seq_len, dtype=torch.bool, device=q.device) if key_mask is None else ~key_mask
    geometry = band_geometry(spec.window, spec.dilations, spec.causal, device)
    tiles = tile_lists(seq_len, spec.window, spec.dilations, spec.causal, key_mask is not None, device)
    fn, args = (band_plain, ()) if position is None else (band_relative, (position.query, position.table))
    if torch.compiler.is_compiling():  # inside the caller's own compiled graph: traced there
        return fn(q, k, v, key_ok, geometry, tiles, *args, spec.scale)
    # On CPU the eager path is chosen on purpose (see the module docstring): silence torch's
    # advice to compile there only, keeping the per-call cost off the GPU path.
    quiet = warnings.catch_warnings() if q.device.type != "cuda" else contextlib.nullcontext()
    try:
        with quiet, _compile_settings():
            if q.device.type != "cuda":
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return _runner(fn, q.device)(q, k, v, key_ok, geometry, tiles, *args, spec.scale)
    except torch._dynamo.exc.FailOnRecompileLimitHit as err:
        reason = f"torch's recompile limit was reached, and eager FlexAttention would be dense ({err})"
        return _fall_back(kind, reason, q, k, v, key_mask, spec, position)
    except torch._dynamo.exc.BackendCompilerFailed as err:  # e.g. a head size FlexAttention cannot tile
        cause = getattr(err, "inner_exception", None) or err
        reason = f"compiling FlexAttention failed: {type(cause).__name__}: {str(cause).splitlines()[0][:300]}"
        return _fall_back(kind, reason, q, k, v, key_mask, spec, position)
