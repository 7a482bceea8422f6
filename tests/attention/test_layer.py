"""LongformerSelfAttention against the independent oracle, with global tokens."""

import pytest
import torch
from helpers import BAND_BACKENDS, backend_or_skip
from oracle import oracle_layer

from longformer_fs.attention import LongformerSelfAttention

T, B, C, H = 21, 4, 12, 3


def global_patterns():
    glob = torch.zeros(B, T, dtype=torch.bool)
    glob[0, [0, T - 1]] = True  # first and last positions
    glob[1, [5, 6, 8]] = True  # inside one another's windows
    glob[2, [0, 3, 9, 10, 11, 17]] = True  # a different count per row
    # row 3: none
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, T - 4 :] = True
    pad[3, T - 9 :] = True
    return pad, glob


def randomize_globals(layer, seed=0):
    """Independent global projections, so a mix-up between local and global shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("q_proj_global", "k_proj_global", "v_proj_global"):
            for p in getattr(layer, name).parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize(
    "window,dilation,causal",
    [(2, 1, False), (1, (1, 2, 3), False), (3, 2, True), (0, 1, False), (30, 1, False), (2, (1, 1, 2), True)],
)
def test_layer_matches_oracle(backend, window, dilation, causal):
    backend = backend_or_skip(backend)
    layer = LongformerSelfAttention(C, H, window, dilation, causal, backend=backend).double()
    randomize_globals(layer)
    x = torch.randn(T, B, C, dtype=torch.float64)
    pad, glob = global_patterns()
    out = layer(x, key_padding_mask=pad, global_mask=glob)
    expected = oracle_layer(layer, x, pad, glob)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
def test_layer_gradients_match_oracle(backend):
    backend = backend_or_skip(backend)
    layer = LongformerSelfAttention(C, H, 2, (1, 2, 1), False, backend=backend).double()
    randomize_globals(layer)
    x = torch.randn(T, B, C, dtype=torch.float64)
    weight = torch.randn(T, B, C, dtype=torch.float64)
    pad, glob = global_patterns()

    def grads(fn):
        xi = x.clone().requires_grad_()
        layer.zero_grad()
        (fn(xi) * weight).sum().backward()
        return {"x": xi.grad} | {n: p.grad.clone() for n, p in layer.named_parameters()}

    ours = grads(lambda xi: layer(xi, pad, glob))
    theirs = grads(lambda xi: oracle_layer(layer, xi, pad, glob))
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-10, rtol=1e-10, msg=name)
    # Every projection, global ones included, takes part.
    assert all(ours[n].abs().sum() > 0 for n in ours)


@pytest.mark.parametrize("backend", BAND_BACKENDS)
def test_layer_gradcheck(backend):
    backend = backend_or_skip(backend)
    layer = LongformerSelfAttention(4, 2, 1, (1, 2), backend=backend).double()
    randomize_globals(layer)
    x = torch.randn(6, 2, 4, dtype=torch.float64, requires_grad=True)
    glob = torch.zeros(2, 6, dtype=torch.bool)
    glob[0, 2] = True
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    assert torch.autograd.gradcheck(lambda xi: layer(xi, pad, glob), (x,))


def test_global_projections_start_as_copies():
    layer = LongformerSelfAttention(16, 4, 3)
    for kind in "qkv":
        local, glob = getattr(layer, f"{kind}_proj"), getattr(layer, f"{kind}_proj_global")
        assert isinstance(glob, torch.nn.Linear)
        assert torch.equal(local.weight, glob.weight) and torch.equal(local.bias, glob.bias)
        assert local.weight.data_ptr() != glob.weight.data_ptr()  # copies, not shared


def test_no_global_tokens_equals_banded_attention():
    from longformer_fs.attention import banded_attention

    layer = LongformerSelfAttention(C, H, 2, (1, 2, 3)).double()
    x = torch.randn(T, B, C, dtype=torch.float64)
    empty = torch.zeros(B, T, dtype=torch.bool)
    out = layer(x, global_mask=empty)

    def split(t):
        return t.transpose(0, 1).reshape(B, T, H, C // H)

    band = banded_attention(split(layer.q_proj(x)), split(layer.k_proj(x)), split(layer.v_proj(x)), 2, (1, 2, 3))
    torch.testing.assert_close(out, layer.out_proj(band.reshape(B, T, C).transpose(0, 1)))
    torch.testing.assert_close(layer(x), out)


def test_dropout_only_in_training():
    layer = LongformerSelfAttention(C, H, 2, dropout=0.5).double()
    x = torch.randn(T, B, C, dtype=torch.float64)
    glob = torch.zeros(B, T, dtype=torch.bool)
    glob[:, 0] = True
    layer.eval()
    torch.testing.assert_close(layer(x, global_mask=glob), layer(x, global_mask=glob))
    layer.train()
    assert not torch.allclose(layer(x, global_mask=glob), layer(x, global_mask=glob))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(embed_dim=10, num_heads=3), "embed_dim"),
        (dict(num_heads=0), "num_heads"),
        (dict(window=-2), "window"),
        (dict(dilation=(1, 2)), "dilation"),
        (dict(dropout=1.0), "dropout"),
        (dict(backend="nope"), "backend"),
    ],
)
def test_bad_constructor_arguments(kwargs, name):
    args = dict(embed_dim=12, num_heads=3, window=2) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}:"):
        LongformerSelfAttention(**args)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda m: m(torch.randn(5, 2, 10)), "x"),
        (lambda m: m(torch.randn(5, 2, 12), key_padding_mask=torch.zeros(5, 2, dtype=torch.bool)), "key_padding_mask"),
        (lambda m: m(torch.randn(5, 2, 12), global_mask=torch.zeros(2, 5)), "global_mask"),
    ],
)
def test_bad_forward_arguments(call, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        call(LongformerSelfAttention(12, 3, 2))
