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

- queries are cut into ``n = ceil(T / w)`` blocks of ``w`` rows, made whole steps of the
  loop below (the last step's rows are padded: under one block a step);
- block ``i`` reads key positions ``[i w - w, i w + 2 w)``: ``3 w`` of them, gathered by
  index (positions outside ``[0, T)`` read a clamped row and are masked), so its scores
  are ``(w, 3 w)``; no ``T x T`` tensor exists, and ``q``, ``k`` and ``v`` are never
  copied whole;
- a key is kept when it lies in the query's band (``|i - j| <= w``, or ``0 <= i - j <= w``
  causal) and ``key_ok`` holds; a row without keys gives 0 and a log-sum-exp of ``-inf``,
  as the op does;
- the blocks are computed up to :data:`CHUNK_ROWS` query rows at a time, in an ONNX
  ``Loop`` whose scan outputs are the steps' rows, so the scores and their softmax's
  temporaries stay the size of one step at any length (written in one piece, they were
  ``3 T w`` floats each, several alive at once: 5.7 GiB at 16K tokens for a base model),
  and each output row is written once.

Scores and the softmax run in float32 (the op's compute dtype for half inputs).
Dilated heads and the relative-position term are not lowered yet: such a model is refused.
"""

from __future__ import annotations

from onnxscript import BOOL, FLOAT, INT64, graph, ir, script
from onnxscript import opset18 as op

from .errors import OnnxExportError


class NotLowerableError(OnnxExportError):
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

    # The n = ceil(T / w) blocks of w query rows run in `chunks` steps of `per_step` blocks,
    # as even as whole blocks allow: a Loop's steps must be of one shape, so the last
    # step's rows are padded (under one block a step; none when T is a multiple of them).
    blocks = op.Div(op.Add(length, _ints(w - 1)), width)
    most = _ints(max(1, CHUNK_ROWS // w))
    chunks = op.Div(op.Add(blocks, op.Sub(most, _ints(1))), most)
    per_step = op.Div(op.Add(blocks, op.Sub(chunks, _ints(1))), chunks)
    padded_blocks = op.Mul(chunks, per_step)
    rows = op.Mul(padded_blocks, width)

    # Block i reads the 3w key positions [i w - w, i w + 2 w): `span`, (chunks * per_step, 3w).
    # Positions outside [0, T) read a clamped row and are masked by key_ok, which is padded
    # (by w before, by the rows past T plus w after) so that position p is its row p + w.
    # Neither q nor k nor v is copied whole: each step gathers what it reads.
    span = op.Add(
        op.Unsqueeze(op.Mul(_range(op.Squeeze(padded_blocks)), op.Constant(value_int=w)), _ints(1)),
        op.Unsqueeze(op.Sub(_range(3 * w), op.Constant(value_int=w)), zero),
    )
    if key_ok is None:
        key_ok = op.Expand(op.Constant(value=ir.tensor(True)), op.Concat(batch, length, axis=0))
    no = op.Constant(value=ir.tensor(False))
    padded_ok = op.Pad(key_ok, op.Concat(zero, width, zero, op.Add(op.Sub(rows, length), width), axis=0), no)
    # Query r of a block sees key c of its span at offset c - r - w: in the band when
    # 0 <= c - r <= 2w (causal: <= w).
    offset = op.Sub(op.Unsqueeze(_range(3 * w), zero), op.Unsqueeze(_range(w), _ints(1)))  # (w, 3w)
    in_band = op.And(op.GreaterOrEqual(offset, op.Constant(value_int=0)),
                     op.LessOrEqual(offset, op.Constant(value_int=w if causal else 2 * w)))  # fmt: skip

    # One ONNX function serves every layer: what differs between layers (the window, the
    # scale) reaches it as inputs, never as constants baked into a function of one name.
    out, lse = chunked_band(
        q, k, v, padded_ok, span, in_band, op.Squeeze(chunks), per_step, width, op.Constant(value_float=float(scale))
    )
    # (chunks, B, H, per_step * w, D) and (chunks, B, H, per_step * w): steps to rows.
    out = op.Reshape(op.Transpose(out, perm=[1, 2, 0, 3, 4]), op.Concat(batch, heads, rows, dim, axis=0))
    lse = op.Reshape(op.Transpose(lse, perm=[1, 2, 0, 3]), op.Concat(batch, heads, rows, axis=0))
    return op.Slice(out, zero, length, _ints(2)), op.Slice(lse, zero, length, _ints(2))


# Query rows per step of the loop: big enough that a step's matrix products are not
# dominated by the loop's overhead, small enough that its (B, H, rows, 3w) float32
# temporaries stay in the tens of megabytes for a base model.
CHUNK_ROWS = 1024


@script()
def chunked_band(
    q: FLOAT,
    k: FLOAT,
    v: FLOAT,
    key_ok: BOOL,
    span: INT64,
    in_band: BOOL,
    chunks: INT64,
    per_step: INT64,
    width: INT64,
    scale: FLOAT,
) -> tuple[FLOAT, FLOAT]:
    """The band, ``per_step`` (``(1,)``) blocks of ``width`` (``(1,)``) queries a step of a
    ``Loop`` whose steps' rows are its scan outputs (each written once: no buffer grows).
    Inputs as :func:`band_forward` prepares them; outputs ``(chunks, B, H, per_step * w, D)``
    and the log-sum-exp ``(chunks, B, H, per_step * w)``."""
    shape = op.Shape(q)
    last_row = op.Sub(op.Slice(shape, op.Constant(value_ints=[2]), op.Constant(value_ints=[3])), 1)
    step_rows = op.Mul(per_step, width)
    depth = op.Slice(shape, op.Constant(value_ints=[3]), op.Constant(value_ints=[4]))
    block_shape = op.Concat(op.Constant(value_ints=[0, 0]), per_step, width, depth, axis=0)  # (B, H, c, w, D)

    @graph()
    def step(i: INT64, go: BOOL):
        index = op.Reshape(i, op.Constant(value_ints=[1]))
        first_row = op.Mul(index, step_rows)
        queries = op.Slice(q, first_row, op.Add(first_row, step_rows), op.Constant(value_ints=[2]))
        got = op.Slice(op.Shape(queries), op.Constant(value_ints=[2]), op.Constant(value_ints=[3]))
        pads = op.Concat(
            op.Constant(value_ints=[0, 0, 0, 0, 0, 0]), op.Sub(step_rows, got), op.Constant(value_ints=[0]), axis=0
        )
        queries = op.Pad(queries, pads)  # the last step's rows past T
        queries = op.Mul(op.Reshape(queries, block_shape), scale)  # (B, H, c, w, D)
        first = op.Mul(index, per_step)
        step_span = op.Slice(span, first, op.Add(first, per_step), op.Constant(value_ints=[0]))  # (c, 3w)
        key_rows = op.Clip(step_span, op.Constant(value_int=0), last_row)
        key_blocks = op.Gather(k, key_rows, axis=2)  # (B, H, c, 3w, D)
        value_blocks = op.Gather(v, key_rows, axis=2)
        scores = op.MatMul(queries, op.Transpose(key_blocks, perm=[0, 1, 2, 4, 3]))  # (B, H, c, w, 3w)
        # The mask as an added 0 or -inf computed without the heads' axis: a broadcast
        # Add is much faster in onnxruntime than a broadcast Where on the scores.
        allowed = op.And(
            op.Unsqueeze(op.Gather(key_ok, op.Add(step_span, width), axis=1), op.Constant(value_ints=[1, 3])),
            in_band,
        )  # (B, 1, c, w, 3w)
        scores = op.Add(scores, op.Where(allowed, op.Constant(value_float=0.0), op.Constant(value_float=float("-inf"))))
        # A row without keys has a maximum of -inf; the floor keeps its exponentials 0 (not
        # nan), so its total is 0, its log-sum-exp -inf and its output 0 / 1. A row with keys
        # has a total of at least 1.
        last = op.Constant(value_ints=[-1])
        top = op.Max(op.ReduceMax(scores, last, keepdims=1), op.Constant(value_float=-1e30))
        weights = op.Exp(op.Sub(scores, top))
        total = op.ReduceSum(weights, last, keepdims=1)
        out = op.Div(op.MatMul(weights, value_blocks), op.Max(total, op.Constant(value_float=1.0)))
        lse = op.Add(top, op.Log(total))
        row_shape = op.Concat(op.Constant(value_ints=[0, 0]), step_rows, axis=0)
        out = op.Reshape(out, op.Concat(row_shape, op.Constant(value_ints=[-1]), axis=0))
        return go, out, op.Reshape(lse, row_shape)

    out, lse = op.Loop(chunks, op.Constant(value=ir.tensor(True)), body=step)
    return out, lse
