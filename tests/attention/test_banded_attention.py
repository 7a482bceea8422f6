"""banded_attention, every backend, against the independent float64 oracle."""

import dataclasses
import functools
import itertools

import pytest
import torch
import torch.nn.functional as F
from helpers import BAND_BACKENDS, backend_or_skip
from oracle import oracle_attention

from longformer_fs.attention import banded_attention

HEADS = 4
DILATIONS = {"d1": 1, "d2": 2, "d3": 3, "mixed": (1, 2, 3, 2)}
WINDOWS = {"w0": 0, "w1": 1, "w3": 3, "wbig": 64}  # 64 >= every T below


def make_inputs(batch, seq_len, heads, head_dim, seed, dtype=torch.float64, pad_rows=True):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, seq_len, heads, head_dim, generator=gen, dtype=dtype) for _ in range(3))
    pad = torch.zeros(batch, seq_len, dtype=torch.bool)
    if pad_rows and batch > 1:
        pad[1, seq_len - seq_len // 3 :] = True  # right padding on one row
    return q, k, v, pad


@functools.lru_cache(maxsize=None)
def oracle_case(seq_len, window, dilation, causal):
    q, k, v, pad = make_inputs(2, seq_len, HEADS, 5, seed=seq_len * 7 + window)
    dil = dilation if isinstance(dilation, tuple) else (dilation,) * HEADS
    return (q, k, v, pad), oracle_attention(q, k, v, window, dil, causal, pad)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("window", list(WINDOWS.values()), ids=list(WINDOWS))
@pytest.mark.parametrize("dilation", list(DILATIONS.values()), ids=list(DILATIONS))
@pytest.mark.parametrize("seq_len", [13, 37])
def test_forward_matches_oracle(backend, causal, window, dilation, seq_len):
    backend = backend_or_skip(backend)
    (q, k, v, pad), expected = oracle_case(seq_len, window, dilation, causal)
    out = banded_attention(q, k, v, window, dilation, causal, pad, backend=backend)
    assert out.dtype == torch.float64 and out.shape == q.shape
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize(
    "causal,window,dilation",
    [(False, 1, 1), (False, 3, (1, 2, 3, 2)), (True, 3, 2), (True, 1, (3, 1, 1, 2)), (False, 64, 1), (True, 0, 1)],
)
def test_gradients_match_oracle(backend, causal, window, dilation):
    backend = backend_or_skip(backend)
    q, k, v, pad = make_inputs(2, 19, HEADS, 3, seed=11)
    dil = dilation if isinstance(dilation, tuple) else (dilation,) * HEADS
    weight = torch.randn(q.shape, dtype=torch.float64)

    def grads(fn):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        (fn(*leaves) * weight).sum().backward()
        return [x.grad for x in leaves]

    ours = grads(lambda a, b, c: banded_attention(a, b, c, window, dilation, causal, pad, backend=backend))
    theirs = grads(lambda a, b, c: oracle_attention(a, b, c, window, dil, causal, pad))
    for name, g, e in zip("qkv", ours, theirs, strict=True):
        torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-10, msg=f"d{name} differs")


@pytest.mark.parametrize("backend", BAND_BACKENDS)
def test_gradcheck(backend):
    backend = backend_or_skip(backend)
    q, k, v, pad = make_inputs(2, 7, 2, 3, seed=3)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    for window, dilation, causal in itertools.product((1, 2), ((1, 3), 2), (False, True)):
        assert torch.autograd.gradcheck(
            lambda a, b, c: banded_attention(a, b, c, window, dilation, causal, pad, backend=backend),
            leaves,
            # flash's CPU stand-in is dense and slow per call: a random direction's Jacobian
            # product (gradcheck's fast mode) checks its backward in 1/20th of the time.
            fast_mode=backend == "flash",
        )


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_window_covering_sequence_is_full_attention(backend, causal):
    """window >= T against torch's own SDPA, a second independent implementation."""
    backend = backend_or_skip(backend)
    q, k, v, _ = make_inputs(2, 29, 3, 8, seed=5, dtype=torch.float32)
    out = banded_attention(q, k, v, 29, causal=causal, backend=backend)
    sdpa = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=causal)
    torch.testing.assert_close(out, sdpa.transpose(1, 2), atol=1e-5, rtol=1e-5)
    huge = banded_attention(q, k, v, 10**9, causal=causal, backend=backend)
    torch.testing.assert_close(huge, out, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
def test_all_rows_padded_but_one(backend):
    backend = backend_or_skip(backend)
    q, k, v, _ = make_inputs(3, 11, HEADS, 4, seed=9)
    pad = torch.ones(3, 11, dtype=torch.bool)
    pad[0, 4] = False  # one real token in row 0
    pad[2] = False  # row 2 unpadded
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = banded_attention(*leaves, 2, (1, 2, 1, 3), False, pad, backend=backend)
    expected = oracle_attention(q, k, v, 2, (1, 2, 1, 3), False, pad)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    # The lone token attends only to itself; fully padded rows are 0 with finite grads.
    torch.testing.assert_close(out[0, 4], v[0, 4])
    assert out[1].abs().max() == 0
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in leaves)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_inputs_softmax_in_fp32(backend, dtype):
    """Half inputs: fp32 internally, result in the input dtype, close to the fp64 oracle."""
    backend = backend_or_skip(backend)
    q, k, v, pad = make_inputs(2, 23, HEADS, 8, seed=13)
    # q fits in fp16 but q.k reaches ~1e5, past fp16's 65504: scores must not be fp16.
    q = (q * 1e4).clamp(-6e4, 6e4)
    naive = torch.einsum("bthd,bshd->bhts", q.half(), k.half())
    assert torch.isinf(naive).any(), "premise: these scores overflow in fp16"
    expected = oracle_attention(q, k, v, 3, (1, 2, 1, 3), True, pad)
    out = banded_attention(q.to(dtype), k.to(dtype), v.to(dtype), 3, (1, 2, 1, 3), True, pad, backend=backend)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    # Inputs were rounded to half, so compare with the oracle on the rounded inputs.
    rounded = oracle_attention(*(x.to(dtype).double() for x in (q, k, v)), 3, (1, 2, 1, 3), True, pad)
    torch.testing.assert_close(out.double(), rounded, atol=tol, rtol=0)
    assert (out.double() - expected).abs().max() < 1.0  # sanity: same attention pattern


@pytest.mark.parametrize("backend", BAND_BACKENDS)
def test_non_contiguous_inputs_and_single_token(backend):
    backend = backend_or_skip(backend)
    base = torch.randn(2, 4, 17, 6, dtype=torch.float64)  # (B, H, T, D) then transposed
    q = k = v = base.transpose(1, 2)
    assert not q.is_contiguous()
    expected = oracle_attention(q, k, v, 2, (1, 1, 2, 3), False)
    torch.testing.assert_close(banded_attention(q, k, v, 2, (1, 1, 2, 3), backend=backend), expected)
    one = torch.randn(1, 1, 2, 4)
    torch.testing.assert_close(banded_attention(one, one, one, 5, backend=backend), one)


BAD_ARGS = [
    (dict(window=-1), "window"),
    (dict(window=1.5), "window"),
    (dict(dilation=0), "dilation"),
    (dict(dilation=(1, 2)), "dilation"),
    (dict(dilation=(1, 2, 0, 1)), "dilation"),
    (dict(k=torch.randn(2, 9, 4, 5)), "k"),
    (dict(v=torch.randn(2, 10, 4, 5, dtype=torch.float64)), "v"),
    (dict(q=torch.randn(10, 4, 5)), "q"),
    (dict(key_padding_mask=torch.zeros(2, 9, dtype=torch.bool)), "key_padding_mask"),
    (dict(key_padding_mask=torch.zeros(2, 10)), "key_padding_mask"),
    (dict(scale="big"), "scale"),
    (dict(backend="flash3"), "backend"),
]


@pytest.mark.parametrize("override,name", BAD_ARGS, ids=[n + str(i) for i, (_, n) in enumerate(BAD_ARGS)])
def test_bad_arguments_raise_value_error_naming_them(override, name):
    args = dict(q=torch.randn(2, 10, 4, 5), k=torch.randn(2, 10, 4, 5), v=torch.randn(2, 10, 4, 5), window=2)
    args.update(override)
    with pytest.raises(ValueError, match=rf"^{name}:") as err:
        banded_attention(**args)
    if name == "backend":
        assert "chunks" in str(err.value)  # names what is available


def test_unavailable_backend_names_the_alternatives(monkeypatch):
    """As on a machine where the extension did not build."""
    from longformer_fs.attention import backends

    kernel = backends.BACKENDS["kernel"]
    monkeypatch.setitem(
        backends.BACKENDS, "kernel", dataclasses.replace(kernel, unavailable_reason=lambda: "not built (test)")
    )
    monkeypatch.setattr(backends, "_CHOICES", {})  # auto chooses again with this registry
    q = torch.randn(1, 8, 2, 4)
    with pytest.raises(ValueError, match=r"^backend: 'kernel' is not available on this machine: not built") as err:
        banded_attention(q, q, q, 2, backend="kernel")
    assert "'chunks'" in str(err.value)
    assert backends.get_backend("auto").name == "chunks"


@pytest.mark.parametrize("name", ["kernel", "flex", "chunks"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_backend_costs_the_bands_work_dilated_or_not(name, causal):
    """``Backend.work``, the pairs each computes from the tiles it visits, covers the band
    and stays flat in the dilation: a dilated head is an undilated band per residue class,
    give or take a part-filled block or tile per class. T is not a multiple of 3."""
    from longformer_fs.attention.backends import BACKENDS
    from longformer_fs.attention.band import band_mask
    from longformer_fs.attention.spec import BandSpec

    seq_len, window = 2000, 100
    work = {d: BACKENDS[name].work(seq_len, BandSpec(window, (d,), causal, 1.0)) for d in (1, 2, 3, 4)}
    for d, pairs in work.items():
        assert pairs >= int(band_mask(seq_len, window, d, causal).sum())
        assert pairs <= 1.15 * work[1], (d, work)
    mixed = BACKENDS[name].work(seq_len, BandSpec(window, (1, 4, 1, 2), causal, 1.0))
    assert mixed == 2 * work[1] + work[4] + work[2]
