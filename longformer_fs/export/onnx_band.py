"""The band attention op, ``longformer_fs::band_forward``, lowered to ONNX operators.

Why a lowering of the op and not an export of a PyTorch band: ``torch.export`` with a
dynamic length cannot trace our PyTorch bands (``chunks`` cuts blocks whose count and
padding are floor divisions of the length, and each becomes a shape guard that it cannot
discharge). The op is opaque to it: its fake implementation gives ``(B, H, T, D)`` for any
``T``, so a model on the ``kernel`` backend exports for every length with no guard. Here
the op becomes ONNX operators whose shapes are values computed at run time (``Shape``,
``Div``, ``Pad``, ``Reshape``, ``Gather``), so one graph serves every length and no length
needs proving.

The computation, per batch row and head, for a one-sided window ``w``:

- queries are padded to ``n = T // w + 2`` blocks of ``w`` rows (always at least one row
  of padding, so that no length is a special case);
- block ``i`` reads keys ``[i w - w, i w + 2 w)`` (``3 w`` of them, gathered from keys
  padded by ``w`` on both sides): scores are ``(n, w, 3 w)``, ``3 T w`` in all, linear in
  the length; no ``T x T`` tensor exists;
- a key is kept when it lies in the query's band (``|i - j| <= w``, or ``0 <= i - j <= w``
  causal) and ``key_ok`` holds; a row without keys gives 0 and a log-sum-exp of ``-inf``,
  as the op does.

Scores and the softmax run in float32 (the op's compute dtype for half inputs).
Dilated heads and the relative-position term are not lowered yet: such a model is refused.
"""

from __future__ import annotations

import torch
from onnxscript import FLOAT, ir
from onnxscript import opset18 as op

from ..attention.backends import kernel  # noqa: F401  (registers longformer_fs::band_forward)


class NotLowerableError(ValueError):
    """A band attention call that the ONNX lowering does not compute."""


def _ints(*values: int):
    return op.Constant(value_ints=list(values))


def _range(stop):
    """``0 .. stop - 1`` as int64; ``stop`` a Python int or a scalar value."""
    stop = op.Constant(value_int=stop) if isinstance(stop, int) else stop
    return op.Range(op.Constant(value_int=0), stop, op.Constant(value_int=1))


def band_forward(q, k, v, key_ok, pos_query, table, dilations, window, causal, scale):
    """ONNX for ``band_forward(q, k, v, key_ok, ...)``: ``(out (B, H, T, D), lse (B, H, T))``
    in float32. Arguments as the op's (:func:`~longformer_fs.attention.backends.kernel.band_forward`)."""
    if any(d != 1 for d in dilations):
        raise NotLowerableError(f"dilated heads ({list(dilations)}) are not lowered to ONNX yet")
    if pos_query is not None or table is not None:
        raise NotLowerableError("the relative-position term is not lowered to ONNX yet")
    w = int(window)
    q, k, v = (op.Cast(x, to=FLOAT.dtype) for x in (q, k, v))
    shape = op.Shape(q)
    batch, heads, length, dim = (op.Slice(shape, _ints(i), _ints(i + 1)) for i in range(4))
    width = _ints(w)
    blocks = op.Add(op.Div(length, width), _ints(2))
    pad = op.Sub(op.Mul(blocks, width), length)  # >= 1
    zero = _ints(0)

    # Queries in blocks of w rows: (B, H, n, w, D).
    padded_q = op.Pad(q, op.Concat(_ints(0, 0, 0, 0), zero, zero, pad, zero, axis=0))
    query_blocks = op.Reshape(padded_q, op.Concat(batch, heads, blocks, width, dim, axis=0))
    # Block i's 3w keys and values, from keys padded by w before and pad + w after.
    key_pads = op.Concat(_ints(0, 0, w, 0, 0, 0), op.Add(pad, width), zero, axis=0)
    span = op.Add(
        op.Unsqueeze(op.Mul(_range(op.Squeeze(blocks)), op.Constant(value_int=w)), _ints(1)),
        op.Unsqueeze(_range(3 * w), zero),
    )  # (n, 3w)
    key_blocks = op.Gather(op.Pad(k, key_pads), span, axis=2)  # (B, H, n, 3w, D)
    value_blocks = op.Gather(op.Pad(v, key_pads), span, axis=2)
    scores = op.Mul(
        op.MatMul(query_blocks, op.Transpose(key_blocks, perm=[0, 1, 2, 4, 3])), op.Constant(value_float=float(scale))
    )  # (B, H, n, w, 3w)

    # Query r of a block sees key c of its span at offset c - r - w: in the band when
    # 0 <= c - r <= 2w (causal: <= w).
    offset = op.Sub(op.Unsqueeze(_range(3 * w), zero), op.Unsqueeze(_range(w), _ints(1)))  # (w, 3w)
    in_band = op.And(op.GreaterOrEqual(offset, op.Constant(value_int=0)),
                     op.LessOrEqual(offset, op.Constant(value_int=w if causal else 2 * w)))  # fmt: skip
    if key_ok is None:
        key_ok = op.Expand(op.Constant(value=ir.tensor(True)), op.Concat(batch, length, axis=0))
    no = op.Constant(value=ir.tensor(False))
    ok_blocks = op.Gather(op.Pad(key_ok, op.Concat(zero, width, zero, op.Add(pad, width), axis=0), no), span, axis=1)
    allowed = op.And(op.Unsqueeze(ok_blocks, _ints(1, 3)), in_band)  # (B, 1, n, w, 3w)

    minus_inf = op.Constant(value_float=float("-inf"))
    scores = op.Where(allowed, scores, minus_inf)
    top = op.ReduceMax(scores, _ints(-1), keepdims=1)
    has_keys = op.Not(op.IsInf(top))
    top = op.Where(has_keys, top, op.Constant(value_float=0.0))
    weights = op.Exp(op.Sub(scores, top))
    total = op.ReduceSum(weights, _ints(-1), keepdims=1)
    total = op.Where(op.Greater(total, op.Constant(value_float=0.0)), total, op.Constant(value_float=1.0))
    out = op.MatMul(op.Div(weights, total), value_blocks)  # (B, H, n, w, D)
    rows = op.Mul(blocks, width)
    out = op.Slice(op.Reshape(out, op.Concat(batch, heads, rows, dim, axis=0)), zero, length, _ints(2))
    lse = op.Where(has_keys, op.Add(top, op.Log(total)), minus_inf)
    lse = op.Slice(op.Reshape(lse, op.Concat(batch, heads, rows, axis=0)), zero, length, _ints(2))
    return out, lse


# For torch.onnx.export(..., custom_translation_table=TRANSLATIONS).
TRANSLATIONS = {torch.ops.longformer_fs.band_forward.default: band_forward}
