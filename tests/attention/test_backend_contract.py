"""One contract for the backends (:mod:`longformer_fs.attention.backends`): each says why it
cannot compute a call, as reasons; ``auto`` passes over a backend with reasons and logs
them, a backend asked for by name refuses the call with the same reasons in one line, and
``auto`` keeps its choice by the spec's fields that those reasons read. What
``longformer-fs check`` found reaches the core from above it, as evidence
(:mod:`longformer_fs.attention.evidence`)."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

import longformer_fs.attention
from longformer_fs import devices
from longformer_fs.attention import backends, evidence
from longformer_fs.attention.backends import BACKENDS, backend_for, choose_backend, get_backend
from longformer_fs.attention.backends import kernel as kernel_backend
from longformer_fs.attention.evidence import NEVER_CHECKED, Verdict
from longformer_fs.attention.layer import LongformerSelfAttention
from longformer_fs.attention.relative_layer import RelativeBandSelfAttention
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
    unknown = r"^backend: unknown attention backend 'fast'; choose 'auto' or one of "
    with pytest.raises(ValueError, match=unknown):
        get_backend("fast")
    for layer in (LongformerSelfAttention, RelativeBandSelfAttention):  # when built, not at the first call
        with pytest.raises(ValueError, match=unknown):
            layer(16, 2, 4, 1, backend="fast")


# ------------------------------------------------------------------ evidence from above the core

ATTENTION = Path(longformer_fs.attention.__file__).parent
ABOVE_THE_CORE = ("longformer_fs.verification", "longformer_fs.commands", "fairseq")


def absolute_imports(path: Path) -> set[str]:
    """Every module ``path`` imports (inside functions too), relative imports made absolute."""
    parts = list(path.relative_to(ATTENTION.parents[1]).with_suffix("").parts)
    package = parts[:-1]  # an __init__'s package is its folder, as a module's is
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_the_core_imports_nothing_above_it():
    """What ``check`` found reaches the core as injected evidence, never by an import: no
    module of the core imports the check, the commands or fairseq (positive control: the
    walk sees the core's own imports, relative ones made absolute)."""
    paths = sorted(ATTENTION.rglob("*.py"))
    imports = {path.relative_to(ATTENTION).as_posix(): absolute_imports(path) for path in paths}
    assert {"torch", "longformer_fs.devices", "longformer_fs.attention.evidence"} <= set().union(*imports.values())
    offenders = {
        name: sorted(m for m in found if m.split(".")[0] == "fairseq" or m.startswith(ABOVE_THE_CORE))
        for name, found in imports.items()
    }
    assert not {name: found for name, found in offenders.items() if found}


class FakeEvidence:
    """What a check above the core might have found: verdicts by backend, and times by
    (dtype name, kind), the same on every device."""

    def __init__(self, times: dict, verdicts: dict | None = None):
        self._times, self._verdicts = times, verdicts or {}

    def verdict(self, backend: str, device: torch.device) -> Verdict:
        return self._verdicts.get(backend, NEVER_CHECKED)

    def times(self, device: torch.device, dtype: torch.dtype, kind: str) -> dict[str, float]:
        return dict(self._times.get((str(dtype).replace("torch.", ""), kind), {}))


@pytest.fixture
def install():
    """Installs evidence for one test, and puts back what was there."""
    before = evidence.current()
    yield evidence.use_evidence
    evidence.use_evidence(before)


@pytest.fixture
def cuda_kernels(monkeypatch):
    """An extension built with the CUDA kernels, so only the evidence decides on them."""
    monkeypatch.setattr(kernel_backend, "has_cuda", lambda: True)


def test_auto_on_the_rehearsed_gpu_takes_what_injected_evidence_measured_fastest(install, cuda_kernels):
    install(FakeEvidence({("bfloat16", "plain"): {"chunks": 1.0, "flash": 2.0, "flex": 3.0}}))
    with devices.rehearsal():
        backend, reason = choose_backend(PLAIN, "meta", torch.bfloat16)
        assert backend.name == "chunks"
        assert "fastest that `longformer-fs check` measured here (bfloat16, plain: chunks 1.00 ms, flash" in reason
        q = torch.zeros(1, 2, 16, 8, device="meta", dtype=torch.bfloat16)
        assert get_backend("auto", PLAIN, q).name == "chunks"
        # The kernels are candidates once the evidence says check passed them, and then fastest.
        passed = Verdict(True, "`longformer-fs check` passed on the rehearsed GPU (test)")
        failed = Verdict(False, "`longformer-fs check` found it wrong on the rehearsed GPU (test)")
        times = {("bfloat16", "plain"): {"kernel": 0.5, "chunks": 1.0, "flash": 2.0}}
        install(FakeEvidence(times, {"kernel": passed, "flash": failed}))
        backend, reason = choose_backend(PLAIN, "meta", torch.bfloat16)
        assert backend.name == "kernel" and "flash: `longformer-fs check` found it wrong on the rehearsed GPU" in reason
        assert choose_backend(PLAIN, "meta", torch.float32)[0].name == "flex"  # nothing measured in float32


def test_without_evidence_auto_takes_its_order_and_the_cuda_kernels_are_not_verified(install, cuda_kernels):
    """The core's default, for a plain-PyTorch user who never imports the plugin."""
    install(evidence.NO_EVIDENCE)
    with devices.rehearsal() as gpu:
        assert kernel_backend.record_reasons(torch.device("meta")) == [
            f"the CUDA kernels are not verified on {gpu.name} for this build; run "
            "`longformer-fs check --device cuda` to verify them"
        ]
        backend, reason = choose_backend(PLAIN, "meta", torch.bfloat16)
        assert backend.name == "flash" and "no measurement of this GPU" in reason
        assert f"kernel: the CUDA kernels are not verified on {gpu.name}" in reason
    assert kernel_backend.record_reasons(torch.device("cpu")) == []  # the CPU kernels need no check
