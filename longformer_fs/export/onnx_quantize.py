"""``export-onnx --quantize int8``: onnxruntime's dynamic quantization of the linear layers.

The weights of every matrix product with a weight (the projections, the feed-forward
layers, the output layer) are stored as int8, one scale per matrix; activations are
quantized per call at run time, so no calibration data is needed. The attention's own
products and softmax stay in float32. The self-check measures what it costs against the
float32 file on the same inputs, and the report keeps it.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import numpy as np

from .. import output
from ..serving.sessions import cpu_session

QUANTIZATIONS = ("int8",)


def quantize_file(path: Path) -> None:
    """Replace the float32 ONNX file ``path`` by its dynamically quantized int8 form."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process concerns static quantization
    try:
        with output.written_file(path) as staged:
            quantize_dynamic(str(path), str(staged), weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def int8_matrices(path: Path) -> int:
    """How many 2-D int8 weight matrices the file holds."""
    import onnx

    model = onnx.load(str(path))
    return sum(1 for t in model.graph.initializer if len(t.dims) == 2 and t.data_type == onnx.TensorProto.INT8)


def top1_agreement(reference: Path, quantized: Path, batches: list[dict], outputs: list[str]) -> dict:
    """``{output: {"top1": fraction, "rows": count, "max_difference": relative}}`` of
    ``quantized`` against ``reference`` on ``batches``: the fraction of the ``rows``
    argmaxes over the last axis that agree (a token's prediction, a class, a span's start
    or end), and the largest difference relative to the largest reference value."""
    sessions = [cpu_session(p) for p in (reference, quantized)]
    agree = {name: [0, 0, 0.0] for name in outputs}
    for batch in batches:
        for name, want, got in zip(outputs, *(s.run(None, batch) for s in sessions), strict=True):
            same = want.argmax(-1) == got.argmax(-1)
            agree[name][0] += int(same.sum())
            agree[name][1] += same.size
            scale = max(1.0, float(np.abs(want).max()))
            agree[name][2] = max(agree[name][2], float(np.abs(want - got).max()) / scale)
    return {
        name: {"top1": round(a / n, 4), "rows": n, "max_difference": round(d, 4)} for name, (a, n, d) in agree.items()
    }


@contextlib.contextmanager
def float_copy(path: Path):
    """A float32 copy of ``path`` beside it, for the agreement check, removed afterwards."""
    copy = Path(path).with_name(Path(path).name + ".float32")
    copy.write_bytes(Path(path).read_bytes())
    try:
        yield copy
    finally:
        copy.unlink(missing_ok=True)
