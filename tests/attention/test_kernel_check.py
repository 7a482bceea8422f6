"""`longformer-fs check` and how `auto` trusts kernels: the records it writes and reads.

The check itself runs here on the CPU kernels (the same code path as on a GPU); the
CUDA side of `auto` is exercised with a simulated GPU name and build, its records
installed as the core's evidence (`verification.use_records`), as the plugin and the
command line install them.
"""

import json

import pytest
import torch
from helpers import cli

from longformer_fs import devices
from longformer_fs.attention import available_backends, evidence
from longformer_fs.attention.backends import choose_backend, get_backend
from longformer_fs.attention.backends import flash as flash_backend
from longformer_fs.attention.backends import kernel as kernel_backend
from longformer_fs.attention.spec import BandSpec
from longformer_fs.verification import kernel_check, records, use_records
from longformer_fs.verification.kernel_check import Case, CaseResult, CheckReport, run_check, save_report

needs_kernel = pytest.mark.skipif("kernel" not in available_backends(), reason="cuda_ext extension not built")
SPEC = BandSpec(16, (1,), False, 0.125)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty records file of this test's own, which auto reads."""
    monkeypatch.setenv("LONGFORMER_FS_CACHE", str(tmp_path))
    records.clear_cache()
    before = evidence.current()
    use_records()
    yield tmp_path
    evidence.use_evidence(before)
    records.clear_cache()


@needs_kernel
def test_check_passes_on_the_cpu_kernels_and_records_it(cache):
    cases = [Case(70, 5, (1, 2), True, True, True), Case(60, 80, (1, 3), False, False, False)]
    report = run_check("cpu", (torch.float32, torch.bfloat16), cases)
    assert report.passed and len(report.results) == 4
    errors = {name for r in report.results for name in r.errors}
    assert {"out", "lse", "dq", "dk", "dv", "dpos_query", "dtable"} <= errors
    fp32 = [r for r in report.results if r.dtype == "float32"]
    assert max(max(r.errors.values()) for r in fp32) < 1e-5
    path = save_report(report)
    record = json.loads(path.read_text())[records.record_key(report.device, report.build)]
    assert record["passed"] and record["cases"] == 4 and record["failures"] == []


@needs_kernel
def test_check_fails_when_the_kernel_is_wrong(cache, monkeypatch):
    """The check can fail: a kernel that drops the scale is caught."""
    real = kernel_backend.band_forward

    def unscaled(q, k, v, key_ok, pos_query, table, dilations, window, causal, scale):
        return real(q, k, v, key_ok, pos_query, table, dilations, window, causal, 1.0)

    monkeypatch.setattr(kernel_backend, "band_forward", unscaled)
    report = run_check("cpu", (torch.float32,), [Case(50, 4, (1,), False, False, False)])
    assert not report.passed and report.failures[0].errors["out"] > 1e-3


def test_a_backend_that_raises_in_check_is_a_failed_case_that_auto_passes_over(cache, monkeypatch):
    """On the rehearsed GPU: flash raising (as a CUDA op refusing a call would) fails its cases
    with the error, the check goes on, and auto passes flash over, saying why."""

    def refusing(*args, **kwargs):
        raise RuntimeError("an error only a GPU shows\nwith a second line")

    monkeypatch.setattr(flash_backend, "_band", refusing)
    with devices.rehearsal():
        report = run_check("meta", (torch.bfloat16,), [Case(70, 5, (1,), False, False, False)])
        flash = [r for r in report.results if r.backend == "flash"]
        assert len(flash) == 2 and {r.dropout for r in flash} == {0.0, 0.1}  # with and without dropout
        assert all(not r.passed and r.error == "RuntimeError: an error only a GPU shows" for r in flash)
        assert all(r.passed and r.error is None for r in report.results if r.backend == "kernel")
        save_report(report)
        backend, reason = choose_backend(SPEC, "meta", torch.bfloat16)
        assert backend.name == "flex" and "flash: `longformer-fs check` found it wrong on rehearsed" in reason


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA build on a GPU named "Fake GPU 80GB", for auto's decisions (no kernel runs)."""
    monkeypatch.setattr(kernel_backend, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Fake GPU 80GB")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))


def record(passed: bool) -> CheckReport:
    result = CaseResult("T=70 w=5", "float32", {"out": 0.0 if passed else 1.0}, 1e-4, passed)
    return CheckReport(
        "Fake GPU 80GB", kernel_check.build_id(), torch.__version__, passed, "2026-11-22T00:00:00", [result]
    )


RELATIVE = BandSpec(16, (1,), True, 0.125, relative=True)
# What `check` measured on the fake GPU: the kernels fastest for plain bf16 calls only.
TIMINGS = {
    "bfloat16": {
        "plain": {"kernel": 0.8, "flash": 0.9, "flex": 1.0, "chunks": 10.0},
        "relative": {"kernel": 3.0, "flex": 2.0, "chunks": 9.0},
    }
}


def test_auto_on_cuda_takes_flash_or_flex_until_check_measures_the_backends(cache, fake_gpu):
    cuda = torch.device("cuda")
    backend, reason = choose_backend(SPEC, cuda, torch.bfloat16)
    assert backend.name == "flash" and "no measurement" in reason
    assert "kernel: the CUDA kernels are not verified on Fake GPU 80GB" in reason and "longformer-fs check" in reason
    backend, reason = choose_backend(SPEC, cuda, torch.float32)  # FlashAttention has no float32
    assert backend.name == "flex" and "flash: FlashAttention computes in float16 or bfloat16" in reason
    save_report(record(passed=False))
    backend, reason = choose_backend(SPEC, cuda, torch.float32)
    assert backend.name == "flex" and "failed on Fake GPU 80GB" in reason
    # A passing check alone does not make the kernels the choice: only a measurement does.
    save_report(record(passed=True))
    assert choose_backend(SPEC, cuda, torch.float32)[0].name == "flex"
    assert choose_backend(SPEC, cuda, torch.bfloat16)[0].name == "flash"


def test_auto_passes_over_flash_where_its_check_failed(cache, fake_gpu):
    cuda = torch.device("cuda")
    flash_wrong = CaseResult("T=70 w=5", "bfloat16", {"dq": 1.0}, 5e-2, False, "flash")
    report = record(passed=True)
    report.results.append(flash_wrong)
    path = save_report(report)
    stored = json.loads(path.read_text())[records.record_key(report.device, report.build)]
    assert stored["passed"] and stored["backends"] == {"kernel": True, "flash": False}  # the kernels stay trusted
    backend, reason = choose_backend(SPEC, cuda, torch.bfloat16)
    assert backend.name == "flex" and "flash: `longformer-fs check` found it wrong on Fake GPU 80GB" in reason


def test_auto_on_cuda_takes_the_fastest_measured_verified_backend(cache, fake_gpu):
    cuda = torch.device("cuda")
    save_report(record(passed=True), TIMINGS)
    backend, reason = choose_backend(SPEC, cuda, torch.bfloat16)
    assert backend.name == "kernel" and "fastest that `longformer-fs check` measured here" in reason
    assert "kernel 0.80 ms, flash 0.90 ms, flex 1.00 ms, chunks 10.00 ms" in reason
    assert choose_backend(RELATIVE, cuda, torch.bfloat16)[0].name == "flex"
    assert choose_backend(SPEC, cuda, torch.float32)[0].name == "flex"  # not measured in fp32
    # Calls flex cannot compute go to the fastest backend that can.
    assert choose_backend(SPEC, cuda, torch.bfloat16, head_dim=8)[0].name == "kernel"
    assert choose_backend(RELATIVE, cuda, torch.bfloat16, head_dim=8)[0].name == "kernel"
    # Timings of kernels that failed their check are never used.
    save_report(record(passed=False), TIMINGS)
    backend, reason = choose_backend(SPEC, cuda, torch.bfloat16)
    assert (
        backend.name == "flash" and "flash 0.90 ms, flex 1.00 ms, chunks 10.00 ms" in reason and "failed on" in reason
    )
    # Another build (a rebuilt extension) is not covered by this record: auto's order again.
    save_report(record(passed=True), TIMINGS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel_backend, "build_id", lambda: "another-build")
        assert choose_backend(SPEC, cuda, torch.bfloat16)[0].name == "flash"
        assert choose_backend(SPEC, cuda, torch.float32)[0].name == "flex"


def test_check_times_the_candidates_it_would_choose_among(cache):
    from longformer_fs.verification.backend_speed import TimingShape, candidates, measure_backends

    cpu = torch.device("cpu")
    timings = measure_backends(cpu, [torch.float32], TimingShape(1, 2, 256, 16, 8))
    assert set(timings["float32"]) == {"plain", "relative"}
    for kind in ("plain", "relative"):
        assert set(timings["float32"][kind]) == set(candidates(cpu, kind, 16)) and timings["float32"][kind]
        assert all(ms > 0 for ms in timings["float32"][kind].values())


def test_auto_order_and_reasons_without_a_gpu():
    assert choose_backend(SPEC, torch.device("cuda"))[0].name in ("flex", "kernel")
    dropout = BandSpec(16, (1,), False, 0.125, dropout_p=0.1)
    backend, reason = choose_backend(dropout, torch.device("cuda"))
    assert backend.name == "chunks" and "flex: it has no attention dropout" in reason
    if "kernel" in available_backends():
        backend, reason = choose_backend(SPEC, torch.device("cpu"))
        assert backend.name == "kernel" and "tested in CI" in reason
        assert choose_backend(BandSpec(4, (1,), True, 1.0, relative=True), torch.device("cpu"))[0].name == "kernel"
    assert get_backend("auto", dropout, torch.zeros(1, 1, 4, 8)).name == "chunks"


def test_auto_logs_its_choice_once(caplog):
    import longformer_fs.attention.backends as backends

    backends.forget_choices()  # and what it logged
    with caplog.at_level("INFO", logger="longformer_fs.attention.backends"):
        for _ in range(3):
            get_backend("auto", SPEC, torch.zeros(1, 1, 4, 8))
    messages = [r.getMessage() for r in caplog.records if "attention backend auto" in r.getMessage()]
    assert len(messages) == 1 and "on cpu" in messages[0]


@needs_kernel
def test_check_and_info_commands(cache):
    result = cli("check", "--device", "cpu", "--dtypes", "float32")
    assert result.returncode == 0, result.stderr
    assert "passed; recorded in" in result.stdout and "auto now (float32, plain): kernel on cpu" in result.stdout
    assert len(json.loads((cache / records.RECORDS).read_text())) == 1
    if not torch.cuda.is_available():
        result = cli("check", "--device", "cuda")
        assert result.returncode == 2 and "no CUDA device" in result.stderr and "Traceback" not in result.stderr
    info = json.loads(cli("info", "--json").stdout)
    assert info["auto"]["cpu/plain"]["backend"] == "kernel"
    assert "tested in CI" in info["auto"]["cpu/plain"]["reason"]
    assert info["extension"]["build"] == kernel_check.build_id()
