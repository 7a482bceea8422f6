"""The Python index-math reference (longformer_fs/attention/band.py) against the spec."""

import itertools

import pytest
import torch
from oracle import allowed_local_keys

from longformer_fs.attention import band


@pytest.mark.parametrize("window,dilation,causal", list(itertools.product((0, 1, 3, 5), (1, 2, 3), (False, True))))
def test_band_key_and_column_enumerate_the_window(window, dilation, causal):
    seq_len = 23
    width = band.band_width(window, causal)
    assert width == (window + 1 if causal else 2 * window + 1)
    for i in range(seq_len):
        keys = [band.band_key(i, c, window, dilation) for c in range(width)]
        assert [j for j in keys if 0 <= j < seq_len] == allowed_local_keys(i, seq_len, window, dilation, causal)
        for c, j in enumerate(keys):
            assert band.band_column(i, j, window, dilation, causal) == c
        # Keys off the lattice, or beyond the window, have no column.
        assert band.band_column(i, i + dilation * (window + 1), window, dilation, causal) is None
        if dilation > 1:
            assert band.band_column(i, i + 1, window, dilation, causal) is None
        if causal:
            assert band.band_column(i, i + dilation, window, dilation, causal) is None


@pytest.mark.parametrize("dilations", [(1,), (2,), (1, 3, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_band_mask_matches_spec(dilations, causal):
    seq_len, window = 17, 2
    masks = band.head_band_mask(seq_len, window, dilations, causal)
    assert masks.shape == (len(dilations), seq_len, seq_len)
    for h, d in enumerate(dilations):
        for i in range(seq_len):
            expected = torch.zeros(seq_len, dtype=torch.bool)
            expected[allowed_local_keys(i, seq_len, window, d, causal)] = True
            assert torch.equal(masks[h, i], expected)


@pytest.mark.parametrize("seq_len,dilation", [(1, 1), (5, 1), (5, 2), (16, 3), (17, 3)])
def test_effective_window_keeps_the_pattern(seq_len, dilation):
    for window in range(0, 2 * seq_len):
        w_eff = band.effective_window(window, seq_len, dilation)
        assert w_eff <= window
        for causal in (False, True):
            assert torch.equal(
                band.band_mask(seq_len, w_eff, dilation, causal), band.band_mask(seq_len, window, dilation, causal)
            )
        if w_eff > 0:  # and it is the smallest such window
            assert not torch.equal(
                band.band_mask(seq_len, w_eff - 1, dilation, False), band.band_mask(seq_len, window, dilation, False)
            )


@pytest.mark.parametrize("seq_len,dilation", [(0, 2), (1, 3), (17, 1), (17, 3), (20, 4), (5, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_in_residue_order_a_dilated_band_is_undilated_bands_on_the_diagonal(seq_len, dilation, causal):
    """What the flex backend relies on (docs/design.md §1), for T not a multiple of d too."""
    window = 2
    order = band.residue_order(seq_len, dilation)
    assert sorted(order.tolist()) == list(range(seq_len))
    want = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    first = 0
    for r in range(dilation):
        n = band.residue_length(seq_len, dilation, r)
        assert order[first : first + n].tolist() == list(range(r, seq_len, dilation))
        want[first : first + n, first : first + n] = band.band_mask(n, window, 1, causal)
        first += n
    assert first == seq_len
    assert torch.equal(band.band_mask(seq_len, window, dilation, causal)[order][:, order], want)
