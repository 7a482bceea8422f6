"""The "flash" backend: FlashAttention-2's sliding window, as torch ships it in aten.

``aten::_flash_attention_forward`` and ``_flash_attention_backward`` take a window
(``window_size_left``, ``window_size_right``), attention dropout and variable-length
segments (``cum_seq``), and return each row's log-sum-exp: a band of ``w`` per side is
the window ``(w, w)``, a causal one ``(w, 0)``. The band's tiles are all it visits, so it
costs the band's work, in fp16 or bf16, with the recipes' dropout.

Around the two ops:

- **Dilation costs the band's work.** A ``(w, d)`` head's band is an undilated ``w`` band
  on each of the ``d`` residue classes ``i = r (mod d)`` (docs/design.md §3). In the
  residue order (:func:`~..band.residue_order`, the one ``flex`` uses) each class is a run
  of slots: a segment of its own, with the window ``w``. Heads of one dilation share
  their segments; each dilation is one call.
- **Documents become segments.** In rows that pack several documents, each residue class
  of each row is cut where the document, or the padding, changes: every run of one
  document is a segment of its own, so the band never crosses a document. The segments'
  count must not depend on the values, so each row and class gets as many as a row can
  hold runs: the call's bound (``BandSpec.max_documents``, which a packed batch counts
  on the host) plus the two of padding at the row's ends; the unused ones are empty, and
  a row with more runs fails on the device. Without a bound the count is read back once
  a call.
- **Padding becomes segments.** fairseq and HF pad at the ends of a row (fairseq's
  translation task on the left, the rest on the right). A row's leading and trailing
  padding, in each residue class, are segments of their own, so no real query sees a
  padded key; padded queries are the caller's to zero. The segments' bounds are computed
  on the device, three per row and class whatever the padding: nothing is read back and
  every shape is static. Padding inside a row cannot be a segment: the call fails on the
  device (an asynchronous check), and :func:`~longformer_fs.attention.banded_attention`,
  whose masks may have holes, does not take this backend.
- **The log-sum-exp's gradient.** The layer merges the band with its global keys through
  the log-sum-exp, so the band's log-sum-exp ``L`` carries a gradient ``g``, which
  FlashAttention's backward does not take. Its backward forms ``D = rowsum(dO * O)`` and
  ``dS = P (dP - D)``; the gradient of ``L`` adds ``P g``, that is ``D - g`` in place of
  ``D``. So the backward is given ``O' = O - (g / |dO|^2) dO``, whose ``D`` is exactly
  that. ``|g| / |dO|`` never exceeds the distance between the band's output and the
  merged one, so ``O'`` stays within the outputs' range in half precision.

On CPU the same code runs :mod:`.flash_stand_in`, which computes the two ops densely with
their contract: the tests check the index logic above against the float64 oracle there.
``auto`` never takes this backend on CPU. On ``meta`` the ops are aten's, whose meta kernels
give shapes without the CUDA kernels' checks: in a rehearsal (:mod:`longformer_fs.devices`)
the backend checks each call against the CUDA ops' contract itself (:func:`cuda_contract`).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from ... import devices
from .. import calls, evidence
from ..band import effective_window
from ..dense import compute_dtype
from ..spec import BandOutput, BandSpec, PositionTerm, refusal
from ..tracing import constant_when_traced
from . import flash_stand_in

HALF = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256  # FlashAttention-2's largest head
WINDOW_ARGS = ("window_size_left", "window_size_right")


@lru_cache(maxsize=None)
def _schema_arguments() -> frozenset[str]:
    """The forward op's argument names, read once: a schema read inside a compiled layer is a
    graph break, and ``get_backend`` asks on every call."""
    try:
        return frozenset(a.name for a in torch.ops.aten._flash_attention_forward.default._schema.arguments)
    except (AttributeError, RuntimeError):
        return frozenset()


@constant_when_traced
def unavailable_reason() -> str | None:
    """Why torch here has no windowed FlashAttention (None: it has)."""
    missing = [name for name in WINDOW_ARGS if name not in _schema_arguments()]
    if missing:
        return f"torch {torch.__version__}'s aten::_flash_attention_forward takes no {missing[0]}"
    return None


# The BandSpec fields that limits() reads: auto keys its choice by them.
READS = frozenset({"relative", "padding_at_ends"})


def limits(spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None) -> list[str]:
    """Why FlashAttention cannot compute this call (empty: it can): the position term, padding
    inside a row, an unsupported head, or (on CUDA) full precision or a GPU older than sm80.
    On CPU the stand-in computes every call. ``spec``/``dtype`` None: any call, any dtype."""
    reasons = []
    if spec is not None and spec.relative:
        reasons.append("it has no relative-position term")
    if spec is not None and not spec.padding_at_ends:
        reasons.append("its masks may pad inside a row (FlashAttention takes padding at the row ends only)")
    if devices.on_gpu(device):
        if head_dim % 8 or head_dim > MAX_HEAD_DIM:
            reasons.append(
                f"FlashAttention-2 takes head dimensions that are multiples of 8 up to {MAX_HEAD_DIM} "
                f"(this call: {head_dim})"
            )
        if dtype is not None and dtype not in HALF:
            reasons.append(
                f"FlashAttention computes in float16 or bfloat16 (this call: {str(dtype).replace('torch.', '')})"
            )
        capability = devices.gpu_capability(device)
        if capability is not None and capability[0] < 8:
            reasons.append("FlashAttention-2 needs an sm80 GPU or newer")
    return reasons


def record_reasons(device: torch.device) -> list[str]:
    """Why ``longformer-fs check`` rules FlashAttention out on this GPU: it failed there, as
    the evidence says (:mod:`..evidence`). Empty where it passed or was never checked."""
    if not devices.on_gpu(device):
        return []
    verdict = evidence.current().verdict("flash", device)
    return [verdict.why] if verdict.passed is False else []


def work(seq_len: int, spec: BandSpec) -> int:
    """Query-key pairs visited for one batch row: the 128 x 128 tiles that each residue class's
    band touches, summed over heads."""
    block = 128
    total = 0
    for d, heads in spec.head_groups().items():
        w = effective_window(spec.window, seq_len, d)
        right = 0 if spec.causal else w
        for r in range(min(d, seq_len)):
            length = (seq_len - r + d - 1) // d
            for start in range(0, length, block):
                lo, hi = max(0, start - w), min(length - 1, start + block - 1 + right)
                total += len(heads) * block * block * (hi // block - lo // block + 1)
    return total


# ------------------------------------------------------------------ the two ops


def _ops(device: torch.device):
    """``(forward, backward)``: aten's FlashAttention on a GPU and on ``meta`` (where its shape
    functions run), held to the CUDA ops' contract in a rehearsal; the stand-in elsewhere."""
    if devices.rehearsing(device):
        return _checked_forward, _checked_backward
    if devices.on_gpu(device) or device.type == "meta":
        return torch.ops.aten._flash_attention_forward, torch.ops.aten._flash_attention_backward
    return flash_stand_in.forward, flash_stand_in.backward


class FlashContractError(RuntimeError):
    """A call that the CUDA FlashAttention ops would refuse (raised in a rehearsal, where
    their meta kernels would not)."""


def cuda_contract(tensors: dict, cum_seq: torch.Tensor, dropout_p: float, return_debug_mask: bool) -> list[str]:
    """What the CUDA FlashAttention-2 ops refuse in a varlen call (the ``TORCH_CHECK``s of its
    ``mha_varlen_fwd`` and ``mha_varlen_bwd``, which the meta kernels skip): the reasons,
    empty when the call is one they take.

    Args:
        tensors: name -> the packed ``(total, H, D)`` inputs (``q``, ``k``, ``v``, and in the
            backward ``out`` and ``grad_out``).
        cum_seq: the segments' bounds.
    """
    reasons = []
    dtypes = {x.dtype for x in tensors.values()}
    if not dtypes <= set(HALF):
        found = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
        reasons.append(f"FlashAttention only supports fp16 and bf16 data type (this call: {found})")
    elif len(dtypes) > 1:
        reasons.append("query, key and value must have the same dtype")
    capability = devices.gpu_capability(next(iter(tensors.values())).device)
    if capability is not None and capability[0] < 8:
        reasons.append("FlashAttention only supports Ampere GPUs or newer")
    q = tensors["q"]
    head_dim = q.shape[-1]
    if head_dim % 8 or head_dim > MAX_HEAD_DIM:
        reasons.append(f"head dimension {head_dim}: it must be a multiple of 8, at most {MAX_HEAD_DIM}")
    if any(x.stride(-1) != 1 for x in tensors.values()):
        reasons.append("input tensor must have contiguous last dimension")
    if any(x.dim() != 3 for x in tensors.values()):
        reasons.append("varlen inputs are (total, heads, head_dim)")
    if cum_seq.dtype != torch.int32:
        reasons.append(f"cu_seqlens must have dtype int32 (this call: {str(cum_seq.dtype).replace('torch.', '')})")
    if not cum_seq.is_contiguous():
        reasons.append("cu_seqlens must be contiguous")
    if return_debug_mask and not dropout_p > 0:
        reasons.append("return_softmax is only supported when p_dropout > 0.0")
    return reasons


def _enforce(reasons: list[str]) -> None:
    if reasons:
        raise FlashContractError("FlashAttention on CUDA would refuse this call: " + "; ".join(reasons))


def _checked_forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, **kw):
    _enforce(cuda_contract({"q": q, "k": k, "v": v}, cum_seq_q, dropout_p, return_debug_mask))
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, **kw
    )


def _checked_backward(grad_out, q, k, v, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, *args, **kw):
    _enforce(cuda_contract({"q": q, "k": k, "v": v, "out": out, "grad_out": grad_out}, cum_seq_q, dropout_p, False))
    return torch.ops.aten._flash_attention_backward(
        grad_out, q, k, v, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, *args, **kw
    )


def _positions_lse(lse: torch.Tensor, cum_seq: torch.Tensor, total: int) -> torch.Tensor:
    """The log-sum-exp as ``(H, total)``, from either layout FlashAttention-2 has returned:
    ``(H, total)`` already, or ``(segments, H, max_len)`` (rows past a segment's end unused)."""
    if lse.dim() == 2:
        return lse
    rows = torch.arange(total, device=lse.device, dtype=cum_seq.dtype)
    segment = torch.searchsorted(cum_seq, rows, right=True) - 1
    offset = rows - cum_seq[segment]
    return lse[segment, :, offset.long()].T


class _FlashBand(torch.autograd.Function):
    """FlashAttention-2 over packed ``(total, H, D)`` segments, returning ``(out, lse (H, total))``,
    both differentiable (see the module docstring for the log-sum-exp's gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, cum_seq, max_len, left, right, dropout_p, scale, draws=None):
        forward_op, _ = _ops(q.device)
        out, lse, rng_state, unused, debug = forward_op(
            q, k, v, cum_seq, cum_seq, max_len, max_len, dropout_p, False, draws is not None,
            scale=scale, window_size_left=left, window_size_right=right,
        )  # fmt: skip
        if draws is not None:  # checks only: the dropout draw, as FlashAttention's debug mask
            draws.append(debug)
        ctx.save_for_backward(q, k, v, out, lse, cum_seq, rng_state, unused)
        ctx.settings = (max_len, left, right, dropout_p, scale)
        return out, _positions_lse(lse, cum_seq, q.shape[0])

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, cum_seq, rng_state, unused = ctx.saved_tensors
        max_len, left, right, dropout_p, scale = ctx.settings
        _, backward_op = _ops(q.device)
        grad_out = torch.zeros_like(out) if grad_out is None else grad_out.contiguous()
        given = out
        if grad_lse is not None:
            dtype = compute_dtype(out.dtype)
            dout = grad_out.to(dtype)
            norm = dout.square().sum(-1)  # (total, H)
            shift = -grad_lse.T.to(dtype) / torch.where(norm > 0, norm, torch.ones_like(norm))
            given = (out.to(dtype) + shift.unsqueeze(-1) * dout).to(out.dtype)
        dq, dk, dv = backward_op(
            grad_out, q, k, v, given, lse, cum_seq, cum_seq, max_len, max_len, dropout_p, False, rng_state, unused,
            scale=scale, window_size_left=left, window_size_right=right,
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None, None, None, None


class _Reorder(torch.autograd.Function):
    """Rows of ``x`` ``(B, T, ...)`` in ``order`` along T; the gradient gathers by the inverse
    permutation (autograd's own would scatter-add, an accumulation, over T rows)."""

    @staticmethod
    def forward(ctx, x, order, inverse):
        ctx.save_for_backward(inverse)
        return x.index_select(1, order)

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return grad.index_select(1, inverse), None, None


# ------------------------------------------------------------------ segments


def _class_bounds(seq_len: int, dilation: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each residue class's first slot in a row and its length: ``(d,)`` long twice.

    Built on the device from ``arange`` (as every tensor here): no copy from the host, and
    under ``torch.compile`` no specialisation on the length."""
    residue = torch.arange(dilation, device=device)
    lengths = (seq_len - residue + dilation - 1) // dilation
    return lengths.cumsum(0) - lengths, lengths


def _orders(seq_len: int, dilation: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The residue order (:func:`~..band.residue_order`: each slot's position) and its inverse
    (each position's slot), ``(T,)`` long."""
    starts, _ = _class_bounds(seq_len, dilation, device)
    position = torch.arange(seq_len, device=device)
    slot = starts[position % dilation] + position // dilation
    return torch.empty_like(slot).scatter_(0, slot, position), slot


def _row_class_starts(batch: int, seq_len: int, dilation: int, device) -> torch.Tensor:
    """``(B, d)`` long: where each row's residue class starts among the packed ``B * T`` slots."""
    starts, _ = _class_bounds(seq_len, dilation, device)
    return torch.arange(batch, device=device)[:, None] * seq_len + starts


def _slots_before(position: torch.Tensor, dilation: int) -> torch.Tensor:
    """The slots of each residue class ``r`` before ``position`` ``p``: ``ceil((p - r) / d)``,
    0 below ``r``; ``position``'s shape with a last dimension ``d``."""
    residue = torch.arange(dilation, device=position.device)
    return (position[..., None] - residue + dilation - 1).clamp(min=0) // dilation


def _cum_seq(bounds: torch.Tensor, total: int) -> torch.Tensor:
    """The segments' starts, in order, closed by ``total``: int32, as FlashAttention takes them."""
    end = torch.full((1,), total, device=bounds.device, dtype=bounds.dtype)
    return torch.cat([bounds.reshape(-1), end]).int()


def _segments(key_mask: torch.Tensor | None, batch: int, seq_len: int, dilation: int, device) -> torch.Tensor:
    """``cum_seq`` (int32): per row and residue class, one segment of its tokens, or, with
    padding (``key_mask`` ``(B, T)`` bool, True for padded keys, at the row ends), three:
    the leading padding, the tokens and the trailing padding. Bounded on the device, with
    a count that depends on the shape alone: nothing is read back."""
    base = _row_class_starts(batch, seq_len, dilation, device)  # (B, d)
    if key_mask is None:
        return _cum_seq(base, batch * seq_len)
    padded = key_mask.int()
    lead = padded.cumprod(1).sum(1)  # (B,)
    trail = torch.minimum(padded.flip(1).cumprod(1).sum(1), seq_len - lead)
    torch._assert_async(
        (padded.sum(1) == lead + trail).all(),
        "flash attention: key_padding_mask pads inside a row; FlashAttention takes padding at the row ends only",
    )
    lead_slots, real_end = _slots_before(lead, dilation), _slots_before(seq_len - trail, dilation)  # (B, d)
    return _cum_seq(torch.stack([base, base + lead_slots, base + real_end], dim=-1), batch * seq_len)


def _document_segments(
    documents: torch.Tensor, key_mask: torch.Tensor | None, dilation: int, max_documents: int | None
) -> torch.Tensor:
    """``cum_seq`` (int32) of packed rows: per row and residue class, one segment per run of
    one document (or of padding), ``runs`` of them whatever the row holds (see the module
    docstring), the unused ones empty at the class's end.

    Args:
        documents: ``(B, T)`` document ids, not decreasing along a row.
        key_mask: ``(B, T)`` bool, True for padded keys, or None.
        max_documents: the most documents a row holds, or None (then counted: a read-back).
    """
    batch, seq_len = documents.shape
    device = documents.device
    changes = documents[:, 1:] != documents[:, :-1]
    if key_mask is not None:
        changes = changes | (key_mask[:, 1:] != key_mask[:, :-1])
    rank = F.pad(changes.long().cumsum(1), (1, 0))  # (B, T): each position's run in its row
    if max_documents is None:  # a rehearsal's tensors hold no count: every position a run
        runs = seq_len if devices.rehearsing(documents) else int(rank[:, -1].max()) + 1
    else:
        runs = max_documents + (2 if key_mask is not None else 0)
        torch._assert_async(
            (rank[:, -1] < runs).all(), "flash attention: a row holds more documents than the call's max_documents"
        )
    # Each run's first position (T for the runs a row does not have), then each class's
    # slots before it.
    first = torch.searchsorted(rank, torch.arange(runs, device=device).expand(batch, runs).contiguous())  # (B, R)
    slots = _slots_before(first, dilation).transpose(1, 2)  # (B, d, R)
    base = _row_class_starts(batch, seq_len, dilation, device)
    return _cum_seq(base[:, :, None] + slots, batch * seq_len)


# ------------------------------------------------------------------ the backend


def _heads(x: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """``x[:, heads]`` without an index tensor (which a list would copy to the device each call)."""
    if heads == list(range(heads[0], heads[-1] + 1)):
        return x[:, heads[0] : heads[-1] + 1]
    return torch.cat([x[:, h : h + 1] for h in heads], dim=1)


def _group(q, k, v, key_mask, spec: BandSpec, dilation: int, draws: list | None = None, documents=None):
    """One dilation's heads ``(B, Hg, T, D)``: ``(out (B, Hg, T, D), lse (B, Hg, T))``; with
    ``draws`` (checks only), the dropout draw appended as a ``(B, Hg, T, T)`` keep mask;
    ``documents`` ``(B, T)``: the ids of packed rows."""
    batch, heads, seq_len, head_dim = q.shape
    packed = [x.transpose(1, 2) for x in (q, k, v)]  # (B, T, Hg, D)
    if dilation > 1:
        order, inverse = _orders(seq_len, dilation, q.device)
        packed = [_Reorder.apply(x, order, inverse) for x in packed]
    packed = [x.reshape(batch * seq_len, heads, head_dim).contiguous() for x in packed]
    if documents is None:
        cum_seq = _segments(key_mask, batch, seq_len, dilation, q.device)
    else:
        cum_seq = _document_segments(documents, key_mask, dilation, spec.max_documents)
    window = effective_window(spec.window, seq_len, dilation)
    max_len = -(-seq_len // dilation)
    # FlashAttention returns its dropout draw only with dropout ("return_softmax is only
    # supported when p_dropout > 0.0"); without dropout every pair is kept.
    debug = None if draws is None or not spec.dropout_p else []
    out, lse = _FlashBand.apply(
        *packed, cum_seq, max_len, window, 0 if spec.causal else window, spec.dropout_p, spec.scale, debug
    )
    if draws is not None:
        keep = None if debug is None else _keep_by_position(debug[0], cum_seq, batch, seq_len, dilation)
        if keep is None:
            keep = torch.ones(batch, heads, seq_len, seq_len, dtype=torch.bool, device=q.device)
        draws.append(keep)
    out = out.view(batch, seq_len, heads, head_dim)
    lse = lse.reshape(heads, batch, seq_len).permute(1, 0, 2)  # (B, Hg, T) in slots
    if dilation > 1:
        out = _Reorder.apply(out, inverse, order)
        lse = _Reorder.apply(lse.transpose(1, 2), inverse, order).transpose(1, 2)
    return out.transpose(1, 2), lse


def _keep_by_position(debug: torch.Tensor, cum_seq: torch.Tensor, batch: int, seq_len: int, dilation: int):
    """FlashAttention's debug mask ``(segments, Hg, >= max_len, >= max_len)``, where a dropped
    pair's probability is negated, as a ``(B, Hg, T, T)`` bool mask by position, True where
    a pair is kept (pairs of different segments, never attended, count as kept)."""
    heads = debug.shape[1]
    keep = torch.ones(batch, heads, seq_len, seq_len, dtype=torch.bool, device=debug.device)
    if devices.rehearsing(debug):  # no values to read the segments from: the shape alone
        return keep
    bounds = cum_seq.tolist()
    order, _ = _orders(seq_len, dilation, debug.device)
    for segment, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if end == start:
            continue
        rows = torch.arange(start, end, device=debug.device)
        row, position = rows // seq_len, order[rows % seq_len]
        local = debug[segment, :, : end - start, : end - start] >= 0  # (Hg, n, n)
        keep[row[0], :, position[:, None], position[None, :]] = local
    return keep


def _band(q, k, v, key_mask, spec: BandSpec, draws: list | None = None, documents=None) -> list[torch.Tensor]:
    """Every head, each dilation's heads in one call: ``[out (B, H, T, D), lse (B, H, T)]``,
    and with ``draws`` the dropout's keep mask ``(B, H, T, T)`` after them."""
    groups = spec.head_groups()
    if len(groups) == 1:
        out, lse = _group(q, k, v, key_mask, spec, next(iter(groups)), draws, documents)
        return [out, lse] + ([draws[-1]] if draws is not None else [])
    heads_of = [None] * q.shape[1]  # each head's results: its group's, sliced to it
    for dilation, heads in groups.items():
        out, lse = _group(*(_heads(x, heads) for x in (q, k, v)), key_mask, spec, dilation, draws, documents)
        results = [out, lse] + ([draws[-1]] if draws is not None else [])
        for i, head in enumerate(heads):
            heads_of[head] = [x[:, i : i + 1] for x in results]
    return [torch.cat(parts, dim=1) for parts in zip(*heads_of, strict=True)]


def attention_with_draws(
    q, k, v, key_mask, spec: BandSpec, documents: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A call of this backend that also returns its dropout draw: ``(out, lse, keep)``, with
    ``keep`` ``(B, H, T, T)`` bool, True for the pairs the dropout kept (FlashAttention's
    debug mask read by position). For ``check`` and the tests, on a few hundred tokens:
    it reads the segments back to the host."""
    out, lse, keep = _band(q, k, v, key_mask, spec, draws=[], documents=documents)
    return out, lse, keep


def flash_band_attention(
    q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None = None, documents: torch.Tensor | None = None
) -> BandOutput:
    """The backend's :class:`~longformer_fs.attention.spec.BandAttentionFn`."""
    reasons = limits(spec, q.device, q.shape[-1], q.dtype)
    if position is not None:
        reasons = reasons or ["it has no relative-position term"]
    if reasons:
        raise ValueError(refusal("flash", reasons))
    calls.record("flash", spec)
    out, lse = _band(q, k, v, key_mask, spec, documents=documents)
    return out, lse
