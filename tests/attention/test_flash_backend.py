"""The ``flash`` backend's own logic, on CPU: the residue order, the segments that padding
makes, the windows, the log-sum-exp's layouts and gradient, dropout and the merge.

FlashAttention-2 runs only on CUDA; on CPU the backend runs the stand-in
(:mod:`longformer_fs.attention.backends.flash_stand_in`), which computes its two ops densely
with their contract, and on ``meta`` aten's own shape functions of those ops, which run the
CUDA code path without a GPU. The oracle is the float64 dense reference (and, with
dropout, the float64 computation of the draw the backend made). The generic backend tests
(test_banded_attention.py, test_layer.py, test_layer_hf.py) run ``flash`` too.
"""

from __future__ import annotations

import pytest
import torch

from longformer_fs.attention import LongformerSelfAttention, banded_attention
from longformer_fs.attention.backends import choose_backend, flash, flash_stand_in
from longformer_fs.attention.band import residue_order
from longformer_fs.attention.spec import BandSpec
from longformer_fs.verification.kernel_check import CASES, check_case


def expected_boundaries(mask: torch.Tensor, dilation: int) -> list[int]:
    """Where a new segment starts in the packed slots, walked slot by slot: each row's
    positions in residue order, a segment for each run of one (row, class, part), the part
    being the leading padding, the tokens, or the trailing padding."""
    batch, seq_len = mask.shape
    keys = []
    for b in range(batch):
        real = (~mask[b]).nonzero().flatten().tolist()
        first, last = (real[0], real[-1]) if real else (seq_len, seq_len)
        for r in range(dilation):
            for position in range(r, seq_len, dilation):
                part = 0 if position < first else (1 if position <= last else 2)
                keys.append((b, r, part))
    starts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
    return starts + [len(keys)]


@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("seq_len", [10, 11])
def test_padding_at_the_ends_becomes_segments_of_each_residue_class(dilation, seq_len):
    mask = torch.zeros(4, seq_len, dtype=torch.bool)
    mask[0, :3] = True  # leading (fairseq's translation sources)
    mask[1, seq_len - 4 :] = True  # trailing (everything else fairseq pads)
    mask[2, :2] = mask[2, seq_len - 1 :] = True  # both
    # row 3: none
    cum_seq = flash._segments(mask, 4, seq_len, dilation, mask.device)
    assert cum_seq.dtype == torch.int32
    assert sorted(set(cum_seq.tolist())) == expected_boundaries(mask, dilation)
    unpadded = flash._segments(None, 4, seq_len, dilation, mask.device)
    assert unpadded.tolist() == expected_boundaries(torch.zeros_like(mask), dilation)
    order, inverse = flash._orders(seq_len, dilation, mask.device)
    assert torch.equal(order, residue_order(seq_len, dilation)) and torch.equal(order[inverse], torch.arange(seq_len))


def test_padding_inside_a_row_fails_the_device_check():
    q = torch.randn(1, 12, 2, 8)
    mask = torch.zeros(1, 12, dtype=torch.bool)
    mask[0, 5] = True
    with pytest.raises(RuntimeError, match="pads inside a row"):
        banded_attention(q, q, q, 2, key_padding_mask=mask, backend="flash")


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("case", [c for c in CASES if not c.relative], ids=lambda c: c.name)
def test_equals_float64_in_both_layouts_flash_has_returned(case, layout, monkeypatch):
    """``check``'s own comparison, on the stand-in: outputs, log-sum-exps and every gradient,
    the log-sum-exp's included (FlashAttention's backward takes none: the backend passes it
    through the output it hands the backward)."""
    monkeypatch.setattr(flash_stand_in, "LSE_LAYOUT", layout)
    result = check_case(case, torch.float64, torch.device("cpu"), backend="flash")
    assert result.passed, result.errors
    assert result.errors["dq"] < 1e-9 and result.errors["dk"] < 1e-9, result.errors


@pytest.mark.parametrize("case", [c for c in CASES if not c.relative][:3], ids=lambda c: c.name)
def test_dropout_equals_float64_of_the_same_draw(case):
    """With dropout, against the float64 computation that drops the pairs the backend's
    draw dropped, read by position from FlashAttention's debug mask: the segments, the
    residue order and the backward's replay of the draw all have to agree."""
    result = check_case(case, torch.float64, torch.device("cpu"), seed=3, backend="flash", dropout=0.1)
    assert result.passed, result.errors
    assert result.case.endswith("dropout=0.1")


def test_dropout_drops_about_its_share_and_changes_with_each_call():
    q = torch.randn(1, 2, 64, 8, dtype=torch.float64)
    spec = BandSpec(16, (1, 2), False, 8**-0.5, dropout_p=0.25)
    first = flash.attention_with_draws(q, q, q, None, spec)
    second = flash.attention_with_draws(q, q, q, None, spec)
    band = torch.ones(64, 64, dtype=torch.bool).triu(-16).tril(16)
    kept = first[2][0, 0][band].double().mean()
    assert 0.7 < kept < 0.8  # 1 - p, over 2,000 pairs
    assert not torch.equal(first[2], second[2]) and not torch.equal(first[0], second[0])


def test_auto_takes_flash_on_cuda_for_every_call_it_can_compute():
    """auto's order on a GPU: flash for plain calls in half precision, dropout or not; the
    character LM's relative calls stay on flex; float32 and masks with holes are not flash's."""
    cuda = torch.device("cuda")

    def chosen(dtype=torch.bfloat16, head_dim=64, **spec):
        settings = {"window": 256, "dilations": (1, 2), "causal": False, "scale": 0.125, **spec}
        return choose_backend(BandSpec(**settings), cuda, dtype, head_dim)[0].name

    assert chosen() == "flash"
    assert chosen(torch.float16, dropout_p=0.1, causal=True) == "flash"
    assert chosen(relative=True, causal=True) == "flex"
    assert chosen(torch.float32) == "flex"
    assert chosen(padding_at_ends=False) == "flex"
    assert chosen(head_dim=12) == "chunks"  # neither FlashAttention takes it


def test_costs_the_bands_work_dilated_or_not():
    """The tiles visited cover the band and stay flat in the dilation (each residue class is
    a plain band), where a dilated band in position order would cost d times its tiles."""
    seq_len, window = 4096, 256
    work = {d: flash.work(seq_len, BandSpec(window, (d,), False, 1.0)) for d in (1, 2, 4)}
    band = seq_len * (2 * window + 1)
    assert all(band <= w <= 1.6 * band for w in work.values()), work
    assert max(work.values()) <= 1.25 * min(work.values()), work


def test_the_cuda_path_runs_on_meta_without_host_waits():
    """On ``meta``, aten's FlashAttention ops run as shape functions: the CUDA path end to end,
    a layer with dilated heads, padding, global tokens and dropout, forward and backward; a
    value read back or a host tensor meeting the device's would raise here."""
    layer = LongformerSelfAttention(64, 4, 8, dilation=(1, 1, 2, 2), dropout=0.1, backend="flash", max_global=8)
    layer = layer.to("meta", torch.bfloat16).train()
    x = torch.randn(50, 2, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    pad = torch.zeros(2, 50, dtype=torch.bool, device="meta")
    glob = torch.zeros(2, 50, dtype=torch.bool, device="meta")
    out = layer(x, pad, glob)
    out.float().sum().backward()
    assert out.shape == x.shape and x.grad.shape == x.shape
    assert layer.q_proj.weight.grad is not None and layer.q_proj_global.weight.grad is not None
