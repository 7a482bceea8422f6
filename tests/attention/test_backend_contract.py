"""One contract for the backends (:mod:`longformer_fs.attention.backends`): each says why it
cannot compute a call, as reasons; ``auto`` passes over a backend with reasons and logs
them, a backend asked for by name refuses the call with the same reasons in one line, and
``auto`` keeps its choice by the spec's fields that those reasons read."""

import dataclasses

import pytest
import torch

from longformer_fs.attention import backends
from longformer_fs.attention.backends import BACKENDS, backend_for, choose_backend, get_backend
from longformer_fs.attention.spec import BandSpec, refusal

PLAIN = BandSpec(4, (1, 2), False, 0.25)
# A call each backend with limits cannot compute, and where: (name, spec, device, dtype).
REFUSED = [
    ("flash", dataclasses.replace(PLAIN, relative=True), "cuda", torch.float16),
    ("flash", PLAIN, "cuda", torch.float32),
    ("flash", dataclasses.replace(PLAIN, padding_at_ends=False), "cpu", torch.float32),
    ("kernel", dataclasses.replace(PLAIN, dropout_p=0.1), "cpu", torch.float32),
    ("flex", dataclasses.replace(PLAIN, dropout_p=0.1), "cuda", torch.float16),
    ("flex", PLAIN, "cuda", torch.float16, 8),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: f"{c[0]}-{c[2]}")
def test_a_backend_by_name_refuses_in_one_line_with_the_reasons_auto_logs(case, caplog):
    name, spec, device, dtype, *head = case
    head_dim, device = (head or [64])[0], torch.device(device)
    reasons = BACKENDS[name].cannot_compute(spec, device, head_dim, dtype)
    assert reasons and all(reason and "\n" not in reason for reason in reasons)
    with pytest.raises(ValueError) as refused:
        backend_for(name, spec, device, dtype, head_dim)
    assert str(refused.value) == refusal(name, reasons) and "\n" not in str(refused.value)
    # auto passes it over with those reasons first (then what `check` recorded, if anything).
    auto_reasons = BACKENDS[name].not_supported_reasons(spec, device, head_dim, dtype)
    assert auto_reasons[: len(reasons)] == reasons
    backends.forget_choices()
    try:
        with caplog.at_level("INFO"):
            chosen = backend_for("auto", spec, device, dtype, head_dim)
    finally:
        backends.forget_choices()
    assert chosen.name != name
    order = backends.AUTO_ORDER[device.type]
    if name in order and order.index(name) < order.index(chosen.name):  # auto asked it before taking another
        logged = " ".join(r.getMessage() for r in caplog.records if "attention backend auto" in r.getMessage())
        assert f"{name}: {'; '.join(auto_reasons)}" in logged


def test_the_backends_functions_refuse_what_their_names_refuse():
    q, k, v = (torch.randn(1, 2, 24, 8) for _ in range(3))
    dropout = dataclasses.replace(PLAIN, dropout_p=0.1)
    for name in ("kernel", "flex"):
        reasons = BACKENDS[name].limits(dropout, q.device, 8, q.dtype)
        with pytest.raises(ValueError, match=f"^{refusal(name, reasons)}$"):
            BACKENDS[name].fn(q, k, v, None, dropout, None)
        with pytest.raises(ValueError, match=f"^{refusal(name, reasons)}$"):
            get_backend(name, dropout, q)


def test_auto_keeps_its_choice_by_what_the_reasons_read(monkeypatch):
    """A backend whose reasons read causality: two calls that differ there alone get
    different choices, because auto's key is built from the fields the reasons read."""

    def no_causal(spec, device, head_dim, dtype=None):
        return ["it has no causal mask (test)"] if spec is not None and spec.causal else []

    kernel = dataclasses.replace(BACKENDS["kernel"], limits=no_causal, reads=frozenset({"causal"}))
    monkeypatch.setitem(BACKENDS, "kernel", kernel)
    backends.forget_choices()
    try:
        assert "causal" in backends.spec_reads()
        q = torch.randn(1, 2, 16, 8)
        assert get_backend("auto", PLAIN, q).name == "kernel"
        assert get_backend("auto", dataclasses.replace(PLAIN, causal=True), q).name == "chunks"
        assert get_backend("auto", PLAIN, q).name == "kernel"
        _, reason = choose_backend(dataclasses.replace(PLAIN, causal=True), "cpu")
        assert "kernel: it has no causal mask (test)" in reason
    finally:
        backends.forget_choices()


def test_a_name_that_is_no_backend_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^backend: unknown attention backend 'fast'; choose 'auto' or one of "):
        get_backend("fast")
