"""The "kernel" backend: the compiled band kernels of ``cuda_ext/``, as torch ops.

The kernels are registered as two ``torch.library`` custom ops, ``longformer_fs::band_forward``
and ``longformer_fs::band_backward``, each with a fake (meta) implementation, and the
forward's gradient is registered through ``torch.library`` too. So ``torch.compile``
traces through the attention without a graph break, and ``torch.library.opcheck``
checks the registrations.

Forward returns the output and its log-sum-exp, and backward takes a gradient for both,
so the layer can merge the band with its global-key columns exactly. The kernels take
any strides with a unit stride on the head dimension, so the transposed
``(B, T, H, D)`` views of the public API go in without copies.

The relative-position term (:class:`~..spec.PositionTerm`) is fused into the kernels:
its scores are added tile by tile, so a long window never materialises a ``(T, W)``
position tensor. Attention dropout is not in the kernels; ``"auto"`` picks another
backend for those calls (see :meth:`~longformer_fs.attention.backends.Backend.not_supported_reasons`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from functools import lru_cache
from typing import Optional, Sequence

import torch

from ... import devices
from .. import calls, evidence
from ..band import residue_length
from ..dense import compute_dtype
from ..spec import BandOutput, BandSpec, PositionTerm, refusal
from ..tracing import constant_when_traced

_MODULE = "longformer_fs._band_kernels"


@lru_cache(maxsize=None)
def _load():
    return importlib.import_module(_MODULE)


@constant_when_traced  # traced code takes the answer, not the import
def unavailable_reason() -> str | None:
    """Why the kernel backend cannot run here (None when it can)."""
    try:
        _load()
    except ImportError as err:
        return f"the cuda_ext extension is not built ({err}); run `make install`"
    return None


def has_cuda() -> bool:
    """Whether the built extension includes the CUDA kernels."""
    return unavailable_reason() is None and bool(_load().has_cuda())


@lru_cache(maxsize=None)
def build_id() -> str:
    """A fingerprint of the compiled extension (its file's SHA-256, shortened): a rebuild
    is a new build, whose CUDA kernels must be checked again."""
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or spec.origin is None:
        return "not-built"
    with open(spec.origin, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


READS = frozenset({"dropout_p", "packed"})  # the BandSpec fields that limits() reads


def limits(spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None) -> list[str]:
    """Why the kernels cannot compute this call (empty: they can): they have no attention
    dropout, and no document boundaries inside a row."""
    reasons = ["it has no attention dropout"] if spec is not None and spec.dropout_p else []
    if spec is not None and spec.packed:
        reasons.append("it has no document boundaries inside a row")
    return reasons


def not_verified(device: torch.device) -> str:
    """The reason of CUDA kernels that ``longformer-fs check`` never verified on this GPU."""
    return (
        f"the CUDA kernels are not verified on {devices.gpu_name(device)} for this build; run "
        "`longformer-fs check --device cuda` to verify them"
    )


def record_reasons(device: torch.device) -> list[str]:
    """Why the CUDA kernels are not candidates on this GPU: none built, or not verified by
    ``longformer-fs check`` for this build, as the evidence says (:mod:`..evidence`; by
    default nothing is verified). Empty: they are. Nothing on CPU."""
    if not devices.on_gpu(device):
        return []
    if not has_cuda():
        return ["this build of the extension has no CUDA kernels"]
    verdict = evidence.current().verdict("kernel", device)
    if verdict.passed:
        return []
    return [verdict.why if verdict.passed is False else not_verified(device)]


CUDA_TILE = 32  # kTile of cuda_ext/cuda/band_attention.cu: queries, and keys, per tile


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs the CUDA forward kernel computes for one batch row.

    Its loops, restated: a work item is one (head, residue class) with ``n`` positions and
    an undilated window clamped to ``n - 1``; each tile of 32 queries meets the 32-key
    tiles that cover its ``key_range`` (``cuda_ext/include/band_index.h``). So the keys
    visited are those of the dilated band, rounded to tiles, never the skipped ones.
    """
    total = 0
    for d in spec.dilations:
        for r in range(min(d, seq_len)):
            n = residue_length(seq_len, d, r)
            window = min(spec.window, n - 1)
            m0 = torch.arange(0, n, CUDA_TILE)
            lo = (m0 - window).clamp(min=0)
            hi = (m0 + CUDA_TILE).clamp(max=n).add(0 if spec.causal else window).clamp(max=n)
            total += int(((hi - lo + CUDA_TILE - 1) // CUDA_TILE).sum()) * CUDA_TILE * CUDA_TILE
    return total


# ------------------------------------------------------------------------------ the ops


@torch.library.custom_op("longformer_fs::band_forward", mutates_args=())
def band_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_ok: Optional[torch.Tensor],
    pos_query: Optional[torch.Tensor],
    table: Optional[torch.Tensor],
    dilations: Sequence[int],
    window: int,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Band attention: ``(out (B, H, T, D), lse (B, H, T))`` in fp32 (fp64 for fp64 inputs).

    q, k, v: ``(B, H, T, D)``; key_ok: ``(B, T)`` bool, True for keys that may be
    attended; pos_query ``(B, H, T, D)`` and table ``(H, W, D)``: the optional
    relative-position term.
    """
    with devices.current(q.device):
        out, lse = _load().forward(
            q, k, v, key_ok, list(dilations), window, causal, scale, pos_query, table, devices.stream_handle(q.device)
        )
    return out, lse


@band_forward.register_fake
def _band_forward_fake(q, k, v, key_ok, pos_query, table, dilations, window, causal, scale):
    dtype = compute_dtype(q.dtype)
    return q.new_empty(q.shape, dtype=dtype), q.new_empty(q.shape[:3], dtype=dtype)


@torch.library.custom_op("longformer_fs::band_backward", mutates_args=())
def band_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_ok: Optional[torch.Tensor],
    pos_query: Optional[torch.Tensor],
    table: Optional[torch.Tensor],
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    dlse: Optional[torch.Tensor],
    dilations: Sequence[int],
    window: int,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv, dpos_query, dtable)`` in the compute dtype; the last two are empty
    (0 elements) without a position term."""
    with devices.current(q.device):
        dq, dk, dv, dpq, dtable = _load().backward(
            q, k, v, key_ok, list(dilations), window, causal, scale, pos_query, table, out, lse, dout, dlse,
            devices.stream_handle(q.device),
        )  # fmt: skip
    if dpq is None:
        dpq, dtable = dq.new_empty(0), dq.new_empty(0)
    return dq, dk, dv, dpq, dtable


@band_backward.register_fake
def _band_backward_fake(q, k, v, key_ok, pos_query, table, out, lse, dout, dlse, dilations, window, causal, scale):
    dtype = compute_dtype(q.dtype)
    grads = [q.new_empty(q.shape, dtype=dtype) for _ in range(3)]
    if pos_query is None:
        return (*grads, q.new_empty(0, dtype=dtype), q.new_empty(0, dtype=dtype))
    return (*grads, q.new_empty(q.shape, dtype=dtype), q.new_empty(table.shape, dtype=dtype))


def _setup_context(ctx, inputs, output):
    q, k, v, key_ok, pos_query, table, dilations, window, causal, scale = inputs
    ctx.save_for_backward(q, k, v, key_ok, pos_query, table, *output)
    ctx.args = (dilations, window, causal, scale)


def _backward(ctx, dout, dlse):
    q, k, v, key_ok, pos_query, table, out, lse = ctx.saved_tensors
    dq, dk, dv, dpq, dtable = band_backward(q, k, v, key_ok, pos_query, table, out, lse, dout, dlse, *ctx.args)
    relative = pos_query is not None
    return (
        dq.to(q.dtype),
        dk.to(k.dtype),
        dv.to(v.dtype),
        None,
        dpq.to(pos_query.dtype) if relative else None,
        dtable.to(table.dtype) if relative else None,
        None,
        None,
        None,
        None,
    )


band_forward.register_autograd(_backward, setup_context=_setup_context)


# -------------------------------------------------------------------------- the backend


def kernel_band_attention(
    q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None = None, documents: torch.Tensor | None = None
) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`."""
    reasons = limits(spec, q.device, q.shape[-1], q.dtype)
    if reasons:
        raise ValueError(refusal("kernel", reasons))
    calls.record("kernel", spec)
    key_ok = None if key_mask is None else ~key_mask
    pos_query, table = (None, None) if position is None else (position.query, position.table)
    return band_forward(q, k, v, key_ok, pos_query, table, list(spec.dilations), spec.window, spec.causal, spec.scale)
