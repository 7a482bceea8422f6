"""Packed rows (issue #75): several documents in one row, each attended as if it ran alone.

The oracle is each document run by itself, in float64: outputs and gradients of a packed
row must equal those of its documents, on every backend that computes packed rows; the
others refuse them by name with their reasons, and ``auto`` passes them over. The layer's
global tokens are global within their own document only; the naive oracle
(tests/oracle.py) takes the same boundaries.
"""

import pytest
import torch
from oracle import oracle_attention, oracle_layer

from longformer_fs.attention import LongformerSelfAttention, banded_attention, calls
from longformer_fs.attention.backends import BACKENDS, available_backends, choose_backend, get_backend
from longformer_fs.attention.spec import BandSpec

# (lengths of the documents of each row); the last row ends in padding.
ROWS = ((9, 14, 6), (4, 21, 3))
SEQ = 29
PACKED_BACKENDS = ("reference", "chunks", "flash", "flex")  # the others refuse packed rows (test below)
# FlexAttention has no backward on CPU (a torch limit): there its packed rows are held to each
# document alone in the forward only; its gradients are checked on a GPU (`check`).
FORWARD_ONLY = frozenset({"flex"})


def packing(rows=ROWS, seq_len=SEQ):
    """Document ids ``(B, T)`` and the key padding ``(B, T)`` of rows packed from ``rows``."""
    documents = torch.zeros(len(rows), seq_len, dtype=torch.long)
    pad = torch.ones(len(rows), seq_len, dtype=torch.bool)
    for b, lengths in enumerate(rows):
        start = 0
        for doc, length in enumerate(lengths):
            documents[b, start : start + length] = doc
            start += length
        pad[b, :start] = False
        documents[b, start:] = len(lengths)  # padding: a document of its own, never attended
    return documents, pad


def spans(rows=ROWS):
    """``(row, start, end)`` of every document."""
    for b, lengths in enumerate(rows):
        start = 0
        for length in lengths:
            yield b, start, start + length
            start += length


def grads(fn, weight, *inputs, backward: bool = True):
    """``fn(*inputs)`` and the gradients of ``(out * weight).sum()`` for its inputs (each None
    without ``backward``)."""
    if not backward:
        with torch.no_grad():
            return fn(*inputs), [None] * len(inputs)
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    out = fn(*inputs)
    (out * weight).sum().backward()
    return out.detach(), [x.grad for x in inputs]


@pytest.mark.parametrize("backend", PACKED_BACKENDS)
@pytest.mark.parametrize(("dilation", "causal"), [(1, False), ((1, 2, 3), False), ((1, 2, 1), True)])
def test_a_packed_row_equals_each_document_run_alone(backend, dilation, causal):
    torch.manual_seed(0)
    documents, pad = packing()
    q, k, v = (torch.randn(len(ROWS), SEQ, 3, 8, dtype=torch.float64) for _ in range(3))

    def packed(q, k, v):
        out = banded_attention(q, k, v, 4, dilation, causal, pad, backend=backend, documents=documents)
        return out.masked_fill(pad[:, :, None, None], 0.0)

    weight = torch.randn(q.shape, dtype=torch.float64)
    backward = backend not in FORWARD_ONLY
    out, (dq, dk, dv) = grads(packed, weight, q, k, v, backward=backward)
    for b, start, end in spans():
        *alone, alone_weight = (x[b : b + 1, start:end] for x in (q, k, v, weight))
        want, want_grads = grads(
            lambda q, k, v: banded_attention(q, k, v, 4, dilation, causal, backend=backend), alone_weight, *alone,
            backward=backward,
        )  # fmt: skip
        torch.testing.assert_close(out[b : b + 1, start:end], want, atol=1e-12, rtol=0)
        for got, expected in zip((dq, dk, dv), want_grads, strict=True) if backward else ():
            torch.testing.assert_close(got[b : b + 1, start:end], expected, atol=1e-12, rtol=0)
    # The oracle takes the same boundaries.
    dilations = (dilation,) * 3 if isinstance(dilation, int) else dilation
    want = oracle_attention(q, k, v, 4, dilations, causal, pad, documents=documents)
    torch.testing.assert_close(out, want.masked_fill(pad[:, :, None, None], 0.0), atol=1e-12, rtol=0)


def test_without_the_boundaries_the_band_crosses_documents():
    """The comparison above can fail: a document's first tokens see the previous one's."""
    torch.manual_seed(1)
    documents, pad = packing()
    q, k, v = (torch.randn(len(ROWS), SEQ, 3, 8, dtype=torch.float64) for _ in range(3))
    leaky = banded_attention(q, k, v, 4, 1, False, pad, backend="chunks")
    sealed = banded_attention(q, k, v, 4, 1, False, pad, backend="chunks", documents=documents)
    b, start, end = list(spans())[1]
    alone = banded_attention(*(x[b : b + 1, start:end] for x in (q, k, v)), 4, backend="chunks")
    assert (leaky[b : b + 1, start:end] - alone).abs().max() > 1e-3
    torch.testing.assert_close(sealed[b : b + 1, start:end], alone, atol=1e-12, rtol=0)


def _layer(backend, dilation=(1, 2, 1, 3), causal=False):
    torch.manual_seed(2)
    layer = LongformerSelfAttention(32, 4, 3, dilation, causal, backend=backend).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, dtype=torch.float64) * 0.1)
    return layer


# Global tokens of each row: a document's first token, and one inside another document.
GLOBAL = ((0, 9, 12), (0, 4, 10))


def _glob():
    glob = torch.zeros(len(ROWS), SEQ, dtype=torch.bool)
    for b, positions in enumerate(GLOBAL):
        glob[b, list(positions)] = True
    return glob


@pytest.mark.parametrize("backend", PACKED_BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_each_documents_global_tokens_are_global_in_that_document_only(backend, causal):
    layer = _layer(backend, causal=causal)
    documents, pad = packing()
    glob = _glob()
    x = torch.randn(SEQ, len(ROWS), 32, dtype=torch.float64)

    def packed(x):
        return layer(x, pad, glob, documents=documents).masked_fill(pad.T[:, :, None], 0.0)

    weight = torch.randn(x.shape, dtype=torch.float64)
    backward = backend not in FORWARD_ONLY
    out, (dx,) = grads(packed, weight, x, backward=backward)
    for b, start, end in spans():
        alone = x[start:end, b : b + 1]
        want, (want_dx,) = grads(
            lambda x: layer(x, None, glob[b : b + 1, start:end]), weight[start:end, b : b + 1], alone,
            backward=backward,
        )  # fmt: skip
        torch.testing.assert_close(out[start:end, b : b + 1], want, atol=1e-12, rtol=0)
        if backward:
            torch.testing.assert_close(dx[start:end, b : b + 1], want_dx, atol=1e-12, rtol=0)
    with torch.no_grad():
        want = oracle_layer(layer, x, pad, glob, documents)
    torch.testing.assert_close(out, want.masked_fill(pad.T[:, :, None], 0.0), atol=1e-12, rtol=0)


def test_a_global_token_that_leaks_to_another_document_fails_the_comparison(monkeypatch):
    """The layer with its global path blind to the boundaries (a leak): the comparison with
    each document alone fails, though the band itself is sealed."""
    layer = _layer("chunks")
    documents, pad = packing()
    glob = _glob()
    x = torch.randn(SEQ, len(ROWS), 32, dtype=torch.float64)
    sealed = layer(x, pad, glob, documents=documents)
    add_global = LongformerSelfAttention._add_global
    monkeypatch.setattr(LongformerSelfAttention, "_add_global", lambda self, *a: add_global(self, *a[:-1], None))
    leaky = layer(x, pad, glob, documents=documents)
    b, start, end = list(spans())[1]
    alone = layer(x[start:end, b : b + 1], None, glob[b : b + 1, start:end])
    torch.testing.assert_close(sealed[start:end, b : b + 1], alone, atol=1e-12, rtol=0)
    assert (leaky[start:end, b : b + 1] - alone).abs().max() > 1e-3


def test_backends_without_boundaries_refuse_packed_rows_and_auto_passes_them_over():
    spec = BandSpec(4, (1,), False, 0.25, packed=True)
    q = torch.randn(1, 2, SEQ, 8)
    for name in sorted(set(BACKENDS) - set(PACKED_BACKENDS)):
        if name not in available_backends():
            continue
        with pytest.raises(ValueError, match=rf"^backend: '{name}' cannot compute this call: .*no document boundaries"):
            get_backend(name, spec, q)
    backend, reason = choose_backend(spec, "cpu")
    assert backend.name in PACKED_BACKENDS and "kernel: it has no document boundaries inside a row" in reason
    assert choose_backend(BandSpec(4, (1,), False, 0.25), "cpu")[0].name == "kernel"  # unpacked: as before


def test_documents_are_checked_in_one_line():
    q = torch.randn(1, SEQ, 2, 8)
    for documents, message in (
        (torch.zeros(1, SEQ), "integer tensor"),
        (torch.zeros(1, SEQ - 1, dtype=torch.long), r"shape \(1, 29\)"),
    ):
        with pytest.raises(ValueError, match=rf"^documents: expected .*{message}"):
            banded_attention(q, q, q, 4, documents=documents)


def test_the_relative_position_term_is_the_same_in_a_packed_row():
    """The character LM's term reads distances only: a packed row's documents get their own."""
    from longformer_fs.attention.functional import band_attention_with_lse
    from longformer_fs.attention.spec import PositionTerm

    torch.manual_seed(3)
    documents, pad = packing()
    q, k, v, pos_query = (torch.randn(len(ROWS), 3, SEQ, 8, dtype=torch.float64) for _ in range(4))
    spec = BandSpec(4, (1, 2, 1), True, 8**-0.5, relative=True, packed=True)
    table = torch.randn(3, 5, 8, dtype=torch.float64)  # (H, w + 1, D): causal columns
    out, _ = band_attention_with_lse(q, k, v, pad, spec, "chunks", PositionTerm(pos_query, table), documents=documents)
    alone_spec = BandSpec(4, (1, 2, 1), True, 8**-0.5, relative=True)
    for b, start, end in spans():
        part = (x[b : b + 1, :, start:end] for x in (q, k, v, pos_query))
        *qkv, pq = part
        want, _ = band_attention_with_lse(*qkv, None, alone_spec, "reference", PositionTerm(pq, table))
        torch.testing.assert_close(out[b : b + 1, :, start:end], want, atol=1e-12, rtol=0)


def test_flash_lays_out_a_bounded_rows_segments_alike_and_a_row_over_the_bound_fails():
    """With the batch's bound (``max_documents``) flash's segments have a static count, the
    unused ones empty: the same outputs as with the count read back; a row holding more
    documents than the bound fails on the device."""
    from longformer_fs.attention.functional import band_attention_with_lse

    torch.manual_seed(4)
    documents, pad = packing()
    q, k, v = (torch.randn(len(ROWS), 3, SEQ, 8, dtype=torch.float64) for _ in range(3))
    spec = BandSpec(4, (1, 2, 3), False, 8**-0.5, packed=True)
    read_back, _ = band_attention_with_lse(q, k, v, pad, spec, "flash", documents=documents)
    for bound in (3, 8):
        bounded = BandSpec(4, (1, 2, 3), False, 8**-0.5, packed=True, max_documents=bound)
        out, _ = band_attention_with_lse(q, k, v, pad, bounded, "flash", documents=documents)
        torch.testing.assert_close(out, read_back, atol=1e-12, rtol=0)
    too_few = BandSpec(4, (1, 2, 3), False, 8**-0.5, packed=True, max_documents=1)  # 3 segments, 4 runs
    with pytest.raises(RuntimeError, match="more documents than the call's max_documents"):
        band_attention_with_lse(q, k, v, pad, too_few, "flash", documents=documents)


@pytest.mark.parametrize(("backend", "runs_on"), [("auto", "flash"), ("flex", "flex")])
def test_a_packed_layer_runs_forward_and_backward_in_the_gpu_rehearsal(backend, runs_on):
    """On the rehearsed GPU, auto takes flash for packed rows (the CUDA kernels refuse them,
    and auto prefers flash to flex), flex's compiled path runs when named, and the layer's
    step runs with its globals and the batch's bound."""
    from longformer_fs import devices

    with devices.rehearsal():
        layer = LongformerSelfAttention(64, 4, 3, (1, 2, 1, 3), backend=backend).to("meta", torch.bfloat16)
        documents, pad = (t.to("meta") for t in packing())
        x = torch.zeros(SEQ, len(ROWS), 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
        with calls.backend_calls() as counts:
            out = layer(x, pad, _glob().to("meta"), max_global=3, documents=documents, max_documents=8)
            out.float().sum().backward()
        assert x.grad.shape == x.shape and set(counts) == {f"{runs_on} (plain)"}
        spec = layer.band_spec(SEQ, packed=True, max_documents=8)
        chosen, reason = choose_backend(spec, "meta", torch.bfloat16, 16)
        assert chosen.name == "flash", reason
