"""The "kernel" backend: the compiled band kernels of ``cuda_ext/``.

Forward returns the output and its log-sum-exp, and backward accepts a gradient for
both, so the layer can merge the band with its global-key columns exactly. The
kernels take any strides with a unit stride on the head dimension, so the transposed
``(B, T, H, D)`` views of the public API go in without copies.

The relative-position term (:class:`~..spec.PositionTerm`) is fused into the CPU
kernel: its scores are added tile by tile, so a long window never materialises a
``(T, W)`` position tensor. Attention dropout, and the position term on CUDA, are not in
the kernels yet; ``"auto"`` picks ``"chunks"`` for those calls (see
:attr:`~longformer_fs.attention.backends.Backend.supports`).
"""

from __future__ import annotations

import contextlib
import importlib

import torch

from ..spec import BandSpec

_MODULE = "longformer_fs._band_kernels"


def _load():
    return importlib.import_module(_MODULE)


def unavailable_reason() -> str | None:
    """Why the kernel backend cannot run here (None when it can)."""
    try:
        _load()
    except ImportError as err:
        return f"the cuda_ext extension is not built ({err}); run `make install`"
    return None


def supports(spec: BandSpec, device: torch.device | None = None) -> bool:
    """Whether the kernels compute this call (on ``device``, when known)."""
    on_cuda = device is not None and torch.device(device).type == "cuda"
    return spec.dropout_p == 0.0 and not (spec.relative and on_cuda)


def _stream(device: torch.device) -> int:
    """The current CUDA stream handle of ``device`` (0 on CPU): kernels launch on it."""
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def _on_device(device: torch.device):
    """Make ``device`` current for the launch (the kernels use the current CUDA device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _like(grad: torch.Tensor | None, x: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None or x is None else grad.to(x.dtype)


class _BandKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_ok, pos_query, table, dilations, window, causal, scale):
        args = (list(dilations), window, causal, scale, pos_query, table)
        with _on_device(q.device):
            out, lse = _load().forward(q, k, v, key_ok, *args, _stream(q.device))
        ctx.save_for_backward(q, k, v, key_ok, pos_query, table, out, lse)
        ctx.args = args[:4]
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, key_ok, pos_query, table, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        with _on_device(q.device):
            dq, dk, dv, dpq, dtable = _load().backward(
                q, k, v, key_ok, *ctx.args, pos_query, table, out, lse, dout, dlse, _stream(q.device)
            )
        return (
            dq.to(q.dtype),
            dk.to(k.dtype),
            dv.to(v.dtype),
            None,
            _like(dpq, pos_query),
            _like(dtable, table),
            None,
            None,
            None,
            None,
        )


def kernel_band_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    spec: BandSpec,
    position=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    if not supports(spec, q.device):  # band_attention_with_lse ties position to spec.relative
        raise ValueError(
            "backend: 'kernel' has no attention dropout, nor a relative-position term on CUDA, "
            "yet; use backend='auto' or 'chunks'"
        )
    key_ok = None if key_mask is None else ~key_mask
    pos_query, table = (None, None) if position is None else (position.query, position.table)
    return _BandKernel.apply(q, k, v, key_ok, pos_query, table, spec.dilations, spec.window, spec.causal, spec.scale)
