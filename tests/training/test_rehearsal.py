"""The GPU path rehearsed in CI: each recipe's model trains a step, evaluates and decodes on the
rehearsal's meta device, taking every decision an sm90 GPU takes (tests/rehearsal.py says how,
and what fails a step). Then each defect the rehearsal exists to catch is put back alone, and
the rehearsal must fail on it, naming it.

Each recipe runs in its own precision (fp16 for all but the character LM, which trains in
float32), and the half-precision ones in bf16 too. With compiled layers: test_rehearsal_compiled.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from rehearsal import RECIPES, rehearse

from longformer_fs import devices
from longformer_fs.attention import dense, layer
from longformer_fs.attention.backends import BACKENDS, flash, forget_choices
from longformer_fs.rehearsal import RehearsalFailure

HALF = [name for name in RECIPES if name != "char_lm_phase1"]


@pytest.mark.parametrize(
    "name, precision",
    [(name, "recipe") for name in RECIPES] + [(name, "bf16") for name in HALF],
)
def test_each_recipes_steps_run_as_on_an_sm90_gpu(name, precision, tmp_path):
    seen = rehearse(name, tmp_path, precision)
    assert seen.calls  # the band ran (on the backend an sm90 GPU takes, or rehearse raises)
    # fairseq's own waits, let through: its loss scaler's overflow check (in fp16 only)
    fp16 = precision == "recipe" and name != "char_lm_phase1"
    assert ("check_overflow" in " ".join(seen.fairseq_reads)) == fp16


def test_the_rehearsal_reaches_the_gpu_decisions():
    """Inside, meta takes the CUDA decisions; outside, nothing changes."""
    meta = torch.device("meta")
    assert not devices.on_gpu(meta) and devices.compiler(meta) == "inductor"
    with devices.rehearsal() as gpu:
        assert devices.on_gpu(meta) and devices.kind(meta) == "cuda" and devices.gpu_capability(meta) == (9, 0)
        assert devices.compiler(meta) == "aot_eager" and devices.fused_float32_products(meta)
        assert devices.gpu_name(meta) == gpu.name and not devices.on_gpu("cpu")
    assert not devices.on_gpu(meta) and not devices.rehearsing()


# ------------------------------------------------------------------ each defect, put back alone


def old_scores(q, k, scale):
    """The half-precision global scores as they were: ``bmm(out_dtype=float32)``, no derivative."""
    batch, heads, length, dim = q.shape
    flat = torch.bmm(q.reshape(batch * heads, length, dim), k.transpose(-1, -2).reshape(batch * heads, dim, -1),
                     out_dtype=torch.float32)  # fmt: skip
    return flat.view(batch, heads, length, -1) * scale


def test_it_fails_on_the_bmm_without_a_derivative(monkeypatch, tmp_path):
    monkeypatch.setattr(layer, "float32_scores", old_scores)
    with pytest.raises(RehearsalFailure, match=r"triviaqa: .*derivative for aten::bmm is not implemented"):
        rehearse("triviaqa", tmp_path)


def test_it_fails_on_an_item_in_the_layer(monkeypatch, tmp_path):
    """The layer reading its global count back, as it does without a bound: ``.item()``."""
    index = layer.global_token_index
    monkeypatch.setattr(layer, "global_token_index", lambda mask, bound=None: index(mask, None))
    read = r"triviaqa: a value read back .* at layer\.py:\d+ \(global_token_index\)"
    with pytest.raises(RehearsalFailure, match=read):
        rehearse("triviaqa", tmp_path)


def test_it_fails_on_a_float32_call_reaching_flash(monkeypatch, tmp_path):
    """flash's own limits blind to the dtype (as the report's oracle part asked them): the
    CUDA op's contract, checked in a rehearsal, refuses the call."""
    limits = flash.limits

    def blind(spec, device, head_dim, dtype=None):
        return limits(spec, device, head_dim)

    monkeypatch.setattr(flash, "limits", blind)
    monkeypatch.setitem(BACKENDS, "flash", dataclasses.replace(BACKENDS["flash"], limits=blind))
    forget_choices()
    try:
        with pytest.raises(RehearsalFailure, match=r"triviaqa: FlashContractError: .*fp16 and bf16 .*float32"):
            rehearse("triviaqa", tmp_path, "fp32")
    finally:
        forget_choices()


def test_it_fails_on_a_tensor_built_on_the_host_every_step(monkeypatch, tmp_path):
    forward = layer.LongformerSelfAttention.forward

    def with_a_host_tensor(self, x, *args, **kwargs):
        return forward(self, x, *args, **kwargs) + torch.tensor([0.0]).to(x.device).expand(x.shape[-1])

    monkeypatch.setattr(layer.LongformerSelfAttention, "forward", with_a_host_tensor)
    with pytest.raises(RehearsalFailure, match=r"triviaqa: copies from the host .*aten\._to_copy"):
        rehearse("triviaqa", tmp_path)


# ------------------------------------------------------------------ the half-precision scores


def test_half_scores_accumulate_in_float32_with_a_derivative(monkeypatch):
    """The scores of half q, k against float64: forward and both gradients. On a GPU the
    forward's product is aten::bmm.dtype; the CPU lacks it, so the same float32 accumulation
    (products of half numbers are exact in float32) stands in for it here."""
    monkeypatch.setattr(dense, "_float32_product", lambda a, b: torch.bmm(a.float(), b.float()))
    gen = torch.Generator().manual_seed(0)
    for dtype, tolerance in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2)):
        q = (torch.randn(2, 3, 40, 16, generator=gen) * 3).to(dtype).requires_grad_()
        k = (torch.randn(2, 3, 5, 16, generator=gen) * 3).to(dtype).requires_grad_()
        grad = torch.randn(2, 3, 40, 5, generator=gen, dtype=torch.float64)
        scores = dense._HalfScores.apply(q, k, 0.25)
        assert scores.dtype == torch.float32
        (scores.double() * grad).sum().backward()
        q64, k64 = (x.detach().double().requires_grad_() for x in (q, k))
        exact = (q64 @ k64.transpose(-1, -2)) * 0.25
        (exact * grad).sum().backward()
        assert (scores.double() - exact).abs().max() <= 1e-6 * exact.abs().max()  # float32 accumulation
        for mine, want in ((q.grad, q64.grad), (k.grad, k64.grad)):
            assert mine.dtype == dtype
            assert (mine.double() - want).abs().max() <= tolerance * want.abs().max()


def test_half_scores_have_a_derivative_on_the_rehearsed_gpu():
    with devices.rehearsal():
        q = torch.randn(2, 3, 40, 16, device="meta", dtype=torch.float16, requires_grad=True)
        k = torch.randn(2, 3, 5, 16, device="meta", dtype=torch.float16, requires_grad=True)
        scores = dense.float32_scores(q, k, 0.25)
        assert scores.dtype == torch.float32 and scores.grad_fn.name().endswith("_HalfScoresBackward")
        scores.sum().backward()
        assert q.grad.shape == q.shape and k.grad.dtype == torch.float16
