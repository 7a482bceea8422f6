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

- queries are padded to ``n = ceil(T / w)`` blocks of ``w`` rows (less than one block of
  padding); keys are padded by ``w`` on both sides;
- block ``i`` reads keys ``[i w - w, i w + 2 w)``: ``3 w`` of them, gathered by index, so
  its scores are ``(w, 3 w)``; no ``T x T`` tensor exists;
- a key is kept when it lies in the query's band (``|i - j| <= w``, or ``0 <= i - j <= w``
  causal) and ``key_ok`` holds; a row without keys gives 0 and a log-sum-exp of ``-inf``,
  as the op does;
- the blocks are computed :data:`CHUNK_ROWS` query rows at a time, in an ONNX ``Loop``, so
  the scores and their softmax's temporaries stay the size of one chunk at any length
  (written in one piece, they were ``3 T w`` floats each, several alive at once: 5.7 GiB
  at 16K tokens for a base model).

Scores and the softmax run in float32 (the op's compute dtype for half inputs).
Dilated heads and the relative-position term are not lowered yet: such a model is refused.
"""

from __future__ import annotations

import torch
from onnxscript import BOOL, FLOAT, INT64, ir, script
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
    width, zero = _ints(w), _ints(0)
    blocks = op.Div(op.Add(length, _ints(w - 1)), width)
    pad = op.Sub(op.Mul(blocks, width), length)  # 0 <= pad < w

    # Queries in blocks of w rows: (B, H, n, w, D); keys, values and key_ok padded by w
    # before and pad + w after, so that block i's keys are padded rows [i w, i w + 3 w).
    padded_q = op.Pad(q, op.Concat(_ints(0, 0, 0, 0), zero, zero, pad, zero, axis=0))
    query_blocks = op.Reshape(padded_q, op.Concat(batch, heads, blocks, width, dim, axis=0))
    key_pads = op.Concat(_ints(0, 0, w, 0, 0, 0), op.Add(pad, width), zero, axis=0)
    padded_k, padded_v = op.Pad(k, key_pads), op.Pad(v, key_pads)
    if key_ok is None:
        key_ok = op.Expand(op.Constant(value=ir.tensor(True)), op.Concat(batch, length, axis=0))
    no = op.Constant(value=ir.tensor(False))
    padded_ok = op.Pad(key_ok, op.Concat(zero, width, zero, op.Add(pad, width), axis=0), no)
    span = op.Add(
        op.Unsqueeze(op.Mul(_range(op.Squeeze(blocks)), op.Constant(value_int=w)), _ints(1)),
        op.Unsqueeze(_range(3 * w), zero),
    )  # (n, 3w)
    # Query r of a block sees key c of its span at offset c - r - w: in the band when
    # 0 <= c - r <= 2w (causal: <= w).
    offset = op.Sub(op.Unsqueeze(_range(3 * w), zero), op.Unsqueeze(_range(w), _ints(1)))  # (w, 3w)
    in_band = op.And(op.GreaterOrEqual(offset, op.Constant(value_int=0)),
                     op.LessOrEqual(offset, op.Constant(value_int=w if causal else 2 * w)))  # fmt: skip

    # One ONNX function serves every layer: what differs between layers (the window, the
    # scale) reaches it as inputs, never as constants baked into a function of one name.
    per_chunk = max(1, CHUNK_ROWS // w)
    chunks = op.Squeeze(op.Div(op.Add(blocks, _ints(per_chunk - 1)), _ints(per_chunk)))
    scaled = op.Mul(query_blocks, op.Constant(value_float=float(scale)))
    out, lse = chunked_band(
        scaled, padded_k, padded_v, padded_ok, span, in_band, chunks, _ints(per_chunk)
    )  # (B, H, n, w, D), (B, H, n, w, 1)
    rows = op.Mul(blocks, width)
    out = op.Slice(op.Reshape(out, op.Concat(batch, heads, rows, dim, axis=0)), zero, length, _ints(2))
    lse = op.Slice(op.Reshape(lse, op.Concat(batch, heads, rows, axis=0)), zero, length, _ints(2))
    return out, lse


# Query rows per step of the loop: big enough that a step's matrix products are not
# dominated by the loop's overhead, small enough that its (B, H, rows, 3w) float32
# temporaries stay in the tens of megabytes for a base model.
CHUNK_ROWS = 1024


@script()
def chunked_band(
    query_blocks: FLOAT,
    keys: FLOAT,
    values: FLOAT,
    key_ok: BOOL,
    span: INT64,
    in_band: BOOL,
    chunks: INT64,
    per_chunk: INT64,
) -> tuple[FLOAT, FLOAT]:
    """The band over blocks of scaled queries, ``per_chunk`` (``(1,)``) blocks a step: a
    ``Loop`` that concatenates each step's rows. Inputs as :func:`band_forward` prepares
    them; outputs ``(B, H, n, w, D)`` and the log-sum-exp ``(B, H, n, w, 1)``."""
    blocks_axis, last = op.Constant(value_ints=[2]), op.Constant(value_ints=[-1])
    out = op.Slice(query_blocks, op.Constant(value_ints=[0]), op.Constant(value_ints=[0]), blocks_axis)
    lse = op.ReduceMax(out, last, keepdims=1)  # both empty: (B, H, 0, w, D) and (B, H, 0, w, 1)
    for i in range(chunks):
        first = op.Mul(op.Reshape(i, op.Constant(value_ints=[1])), per_chunk)
        stop = op.Add(first, per_chunk)
        step_span = op.Slice(span, first, stop, op.Constant(value_ints=[0]))  # (c, 3w)
        key_blocks = op.Gather(keys, step_span, axis=2)  # (B, H, c, 3w, D)
        value_blocks = op.Gather(values, step_span, axis=2)
        scores = op.MatMul(
            op.Slice(query_blocks, first, stop, blocks_axis), op.Transpose(key_blocks, perm=[0, 1, 2, 4, 3])
        )
        allowed = op.And(
            op.Unsqueeze(op.Gather(key_ok, step_span, axis=1), op.Constant(value_ints=[1, 3])), in_band
        )  # (B, 1, c, w, 3w)
        scores = op.Where(allowed, scores, op.Constant(value_float=float("-inf")))  # (B, H, c, w, 3w)
        top = op.ReduceMax(scores, last, keepdims=1)
        has_keys = op.Not(op.IsInf(top))
        top = op.Where(has_keys, top, op.Constant(value_float=0.0))
        weights = op.Exp(op.Sub(scores, top))
        total = op.ReduceSum(weights, last, keepdims=1)
        total = op.Where(op.Greater(total, op.Constant(value_float=0.0)), total, op.Constant(value_float=1.0))
        out = op.Concat(out, op.MatMul(op.Div(weights, total), value_blocks), axis=2)
        step_lse = op.Where(has_keys, op.Add(top, op.Log(total)), op.Constant(value_float=float("-inf")))
        lse = op.Concat(lse, step_lse, axis=2)
    return out, lse


# For torch.onnx.export(..., custom_translation_table=TRANSLATIONS).
TRANSLATIONS = {torch.ops.longformer_fs.band_forward.default: band_forward}
