"""The Transformer-XL relative-position term in band layout against the float64 oracle."""

import pytest
import torch
from oracle import oracle_attention

from longformer_fs.attention import band
from longformer_fs.attention.functional import band_attention_with_lse
from longformer_fs.attention.relative import band_distances, sinusoid
from longformer_fs.attention.spec import BandSpec, PositionTerm

H, D = 3, 4


@pytest.mark.parametrize("backend", ["reference", "chunks", "kernel"])
@pytest.mark.parametrize(
    "seq_len,window,dilations,causal",
    [
        (17, 3, (1, 1, 1), True),
        (17, 2, (1, 2, 3), False),
        (19, 4, (2, 1, 3), True),
        (6, 9, (1, 2, 1), True),  # window clamped: only the table's middle columns are used
        (6, 9, (1, 1, 3), False),
    ],
)
def test_position_term_matches_oracle(backend, seq_len, window, dilations, causal):
    gen = torch.Generator().manual_seed(seq_len + window)
    q, k, v, pq = (torch.randn(2, seq_len, H, D, generator=gen, dtype=torch.float64) for _ in range(4))
    table = torch.randn(H, band.band_width(window, causal), D, generator=gen, dtype=torch.float64)
    pad = torch.zeros(2, seq_len, dtype=torch.bool)
    pad[1, seq_len - 2 :] = True
    leaves = [x.clone().requires_grad_() for x in (q, k, v, pq, table)]
    spec = BandSpec(window, dilations, causal, D**-0.5, relative=True)
    heads_first = [x.transpose(1, 2) for x in leaves[:4]]
    out, _ = band_attention_with_lse(*heads_first[:3], pad, spec, backend, PositionTerm(heads_first[3], leaves[4]))
    out = out.transpose(1, 2).masked_fill(pad[..., None, None], 0)
    oracle_leaves = [x.clone().requires_grad_() for x in (q, k, v, pq, table)]
    expected = oracle_attention(
        *oracle_leaves[:3], window, dilations, causal, pad, pos_query=oracle_leaves[3], pos_table=oracle_leaves[4]
    )
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)

    weight = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    (out * weight).sum().backward()
    (expected * weight).sum().backward()
    for name, a, b in zip(("q", "k", "v", "pos_query", "table"), leaves, oracle_leaves, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-10, rtol=1e-10, msg=name)


def test_position_term_needs_a_relative_spec():
    q = torch.randn(1, 1, 5, 2)
    spec = BandSpec(2, (1,), True, 1.0, relative=True)
    with pytest.raises(ValueError, match="position"):
        band_attention_with_lse(q, q, q, None, spec)  # relative spec without a term


def test_band_distances_and_sinusoid():
    dist = band_distances(2, (1, 3), causal=False)
    assert dist.tolist() == [[2, 1, 0, -1, -2], [6, 3, 0, -3, -6]]
    assert band_distances(2, (2,), causal=True).tolist() == [[4, 2, 0]]
    emb = sinusoid(dist, 8)
    assert emb.shape == (2, 5, 8)
    torch.testing.assert_close(emb[0, 2], torch.tensor([0.0] * 4 + [1.0] * 4))  # distance 0
    torch.testing.assert_close(emb[..., :4] ** 2 + emb[..., 4:] ** 2, torch.ones(2, 5, 4))
    with pytest.raises(ValueError, match="^dim"):
        sinusoid(dist, 5)


@pytest.mark.parametrize(
    "window,dilations,causal", [(40, (1, 2, 3), True), (23, (2, 1, 1), False), (300, (1, 1, 2), True)]
)
def test_kernel_position_term_fp32_many_blocks(window, dilations, causal):
    """fp32 kernel vs the float64 oracle on a sequence of several query blocks per item,
    where blocks start mid-table (c0 > 0), and with w >= T (the clamped table)."""
    seq_len, dim = 260, 16
    gen = torch.Generator().manual_seed(window)
    q, k, v, pq = (torch.randn(1, seq_len, H, dim, generator=gen, dtype=torch.float64) for _ in range(4))
    table = torch.randn(H, band.band_width(window, causal), dim, generator=gen, dtype=torch.float64)
    leaves = [x.float().requires_grad_() for x in (q, k, v, pq, table)]
    spec = BandSpec(window, dilations, causal, dim**-0.5, relative=True)
    heads_first = [x.transpose(1, 2) for x in leaves[:4]]
    out, _ = band_attention_with_lse(*heads_first[:3], None, spec, "kernel", PositionTerm(heads_first[3], leaves[4]))
    oracle_leaves = [x.clone().requires_grad_() for x in (q, k, v, pq, table)]
    expected = oracle_attention(
        *oracle_leaves[:3], window, dilations, causal, pos_query=oracle_leaves[3], pos_table=oracle_leaves[4]
    )
    torch.testing.assert_close(out.transpose(1, 2).double(), expected, atol=1e-5, rtol=1e-5)

    weight = torch.randn(out.transpose(1, 2).shape, generator=gen, dtype=torch.float64)
    (out.transpose(1, 2) * weight.float()).sum().backward()
    (expected * weight).sum().backward()
    for name, a, b in zip(("q", "k", "v", "pos_query", "table"), leaves, oracle_leaves, strict=True):
        torch.testing.assert_close(a.grad.double(), b.grad, atol=1e-4, rtol=1e-4, msg=name)
