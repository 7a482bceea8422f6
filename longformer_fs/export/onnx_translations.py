"""What ``torch.onnx.export`` is told to write our way (its ``custom_translation_table``).

- Our band op becomes ONNX operators (:mod:`.onnx_band`).
- The exact GELU is written in the order onnxruntime's graph optimizer recognises,
  ``x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5``: it becomes one ``Gelu`` node, and with the
  linear layer's bias before it, one ``BiasGelu``. The exporter's own order (``0.5 * (1 +
  erf)`` first) is left as five elementwise passes over the ``(T, 4C)`` activations, each
  a new buffer: at 16K tokens, 192 MiB apiece in a base model.
"""

from __future__ import annotations

import math

import torch
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops.nn import aten_gelu

from ..attention.backends import kernel  # noqa: F401  (registers longformer_fs::band_forward)
from . import onnx_band


def gelu(x, approximate: str = "none"):
    """ONNX for ``aten.gelu``; the tanh approximation as the exporter writes it."""
    if approximate != "none":
        return aten_gelu(x, approximate=approximate)

    def constant(value: float):
        return op.CastLike(op.Constant(value_float=value), x)

    erf = op.Erf(op.Div(x, constant(math.sqrt(2.0))))
    return op.Mul(op.Mul(x, op.Add(erf, constant(1.0))), constant(0.5))


TRANSLATIONS = {
    torch.ops.longformer_fs.band_forward.default: onnx_band.band_forward,
    torch.ops.aten.gelu.default: gelu,
}
