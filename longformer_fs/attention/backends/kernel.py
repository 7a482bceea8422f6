"""The "kernel" backend: the compiled band kernels of ``cuda_ext/``.

Forward returns the output and its log-sum-exp, and backward accepts a gradient for
both, so the layer can merge the band with its global-key columns exactly. The
kernels take any strides with a unit stride on the head dimension, so the transposed
``(B, T, H, D)`` views of the public API go in without copies.

Attention dropout and the relative-position term are not in the kernels yet; ``"auto"``
picks ``"chunks"`` for calls that need them (see
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


def supports(spec: BandSpec) -> bool:
    return spec.dropout_p == 0.0 and not spec.relative


def _stream(device: torch.device) -> int:
    """The current CUDA stream handle of ``device`` (0 on CPU): kernels launch on it."""
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def _on_device(device: torch.device):
    """Make ``device`` current for the launch (the kernels use the current CUDA device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class _BandKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_ok, dilations, window, causal, scale):
        args = (list(dilations), window, causal, scale)
        with _on_device(q.device):
            out, lse = _load().forward(q, k, v, key_ok, *args, _stream(q.device))
        ctx.save_for_backward(q, k, v, key_ok, out, lse)
        ctx.args = args
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, key_ok, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        with _on_device(q.device):
            dq, dk, dv = _load().backward(q, k, v, key_ok, *ctx.args, out, lse, dout, dlse, _stream(q.device))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def kernel_band_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, spec: BandSpec,
    position=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend entry point; see :mod:`longformer_fs.attention.backends` for the contract."""
    if not supports(spec):  # band_attention_with_lse ties position to spec.relative
        raise ValueError("backend: 'kernel' has no attention dropout or relative-position term yet; "
                         "use backend='auto' or 'chunks'")
    key_ok = None if key_mask is None else ~key_mask
    return _BandKernel.apply(q, k, v, key_ok, spec.dilations, spec.window, spec.causal, spec.scale)
