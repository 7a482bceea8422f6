"""Checking the compiled kernels, and FlashAttention's window, on the user's device.

CI has no GPU, so the CUDA kernels can only be proven where they run. :func:`run_check`
runs them against the dense reference in float64 on the CPU (an independent
computation: :mod:`longformer_fs.attention.backends.reference`): forward outputs and log-sum-exps, and the
gradients of q, k, v, the position term and the log-sum-exp, in fp32, fp16 and bf16,
with dilation, causal windows, padding and the relative-position term.

On CUDA it also checks the ``flash`` backend (torch's FlashAttention-2 with our segments,
residue order and log-sum-exp gradient) on every case without the position term, in fp16
and bf16, without dropout and with the recipes' 0.1: there the float64 computation drops
exactly the pairs FlashAttention dropped (its debug mask), so the gradients are compared
too.

The result is recorded per device name and per extension build (:mod:`.records`), with
the backends' timings when the caller measured them (:mod:`.backend_speed`): where the
records are installed as the core's evidence, ``auto`` uses the CUDA kernels only on a
device and build with a passing record, passes over ``flash`` where its check failed, and
picks among the backends by those timings.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch

from .. import devices
from ..attention.backends import flash as flash_backend
from ..attention.backends import kernel as kernel_backend
from ..attention.backends.reference import allowed_pairs, reference_band_attention
from ..attention.band import band_width
from ..attention.dense import masked_attention
from ..attention.spec import BandSpec, PositionTerm
from . import records

# Tolerances against float64 (docs/design.md §2): fp32 on a GPU, and half inputs with
# fp32 accumulation.
TOLERANCES = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-9}


@dataclass(frozen=True)
class Case:
    """One configuration: shapes, window, per-head dilations, causal, padding, position term."""

    seq_len: int
    window: int
    dilations: tuple[int, ...]
    causal: bool
    padded: bool
    relative: bool
    head_dim: int = 32
    batch: int = 2

    @property
    def name(self) -> str:
        parts = [f"T={self.seq_len}", f"w={self.window}", f"d={','.join(map(str, self.dilations))}"]
        parts += [
            flag for flag, on in (("causal", self.causal), ("padding", self.padded), ("relative", self.relative)) if on
        ]
        return " ".join(parts)


# Several tiles per item (the CUDA kernels use 32-row tiles; the CPU kernel 48-row
# blocks), clamped and unclamped windows, mixed dilations, padding that empties rows.
CASES = (
    Case(70, 5, (1, 1, 1, 1), False, False, False),
    Case(150, 20, (1, 2, 3, 1), False, True, False),
    Case(150, 20, (1, 2, 3, 1), True, True, False),
    Case(97, 200, (1, 3), False, False, False),
    Case(130, 9, (2, 1), True, False, True),
    Case(160, 33, (1, 1, 2, 4), False, True, True),
    Case(90, 60, (1, 3), True, False, True),  # the dilated head's window is clamped to its 30 positions
)


# The flash backend's checks: half precision, without and with the recipes' dropout.
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_DROPOUTS = (0.0, 0.1)


@dataclass
class CaseResult:
    case: str
    dtype: str
    errors: dict  # output name -> max abs error against float64
    tolerance: float
    passed: bool
    backend: str = "kernel"
    dropout: float = 0.0
    error: str | None = None  # what the backend raised, when it could not compute the case


@dataclass
class CheckReport:
    device: str
    build: str
    torch: str
    passed: bool
    when: str
    results: list[CaseResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]

    def backend_passed(self) -> dict[str, bool]:
        """Whether each checked backend passed all its cases."""
        passed: dict[str, bool] = {}
        for r in self.results:
            passed[r.backend] = passed.get(r.backend, True) and r.passed
        return passed


def build_id() -> str:
    return kernel_backend.build_id()


def _inputs(case: Case, dtype: torch.dtype, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    heads = len(case.dilations)
    shape = (case.batch, heads, case.seq_len, case.head_dim)
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(3))
    key_mask = None
    if case.padded:  # the last row: a long padded tail, so some query rows see no key at all
        key_mask = torch.zeros(case.batch, case.seq_len, dtype=torch.bool)
        key_mask[-1, case.seq_len // 2 :] = True
    position = None
    if case.relative:
        width = band_width(case.window, case.causal)
        position = PositionTerm(
            torch.randn(shape, generator=gen, dtype=torch.float64),
            torch.randn(heads, width, case.head_dim, generator=gen, dtype=torch.float64) * 0.3,
        )
    grads = (
        torch.randn(shape, generator=gen, dtype=torch.float64),
        torch.randn(shape[:3], generator=gen, dtype=torch.float64),
    )
    if key_mask is not None:  # padded query rows: the caller zeroes them, so no gradient comes back
        grads = (grads[0].masked_fill(key_mask[:, None, :, None], 0.0), grads[1].masked_fill(key_mask[:, None], 0.0))
    return q, k, v, key_mask, position, grads


def _run(fn, q, k, v, key_mask, position, spec, grads):
    """Outputs and gradients of one call, with the given output gradients. ``fn`` returns
    ``(out, lse)``, as a backend does."""
    leaves = [q, k, v] + ([] if position is None else [position.query, position.table])
    leaves = [x.detach().requires_grad_() for x in leaves]
    pos = None if position is None else PositionTerm(leaves[3], leaves[4])
    out, lse = fn(leaves[0], leaves[1], leaves[2], key_mask, spec, pos)
    finite = torch.isfinite(lse)
    g_out, g_lse = (g.to(out.device, out.dtype) for g in grads)
    loss = (out * g_out).sum() + torch.where(finite, lse, torch.zeros_like(lse)).mul(g_lse).sum()
    loss.backward()
    names = ["dq", "dk", "dv"] + ([] if position is None else ["dpos_query", "dtable"])
    values = {"out": out.detach(), "lse": torch.where(finite, lse, torch.zeros_like(lse)).detach()}
    values.update({n: x.grad for n, x in zip(names, leaves, strict=True)})
    return values


def dropped_reference(q, k, v, key_mask, spec: BandSpec, keep: torch.Tensor):
    """The reference backend's dense band attention, dropping exactly the pairs ``keep``
    ``(B, H, T, T)`` does not keep: ``(out, lse)``."""
    allowed = allowed_pairs(q.shape[2], key_mask, spec, q.device)
    return masked_attention(q, k, v, allowed, spec.scale, spec.dropout_p, keep=keep.to(q.device))


def check_case(
    case: Case, dtype: torch.dtype, device: torch.device, seed: int = 0, backend: str = "kernel",
    dropout: float = 0.0,
) -> CaseResult:  # fmt: skip
    """A backend (``kernel`` or ``flash``) on ``device`` in ``dtype`` against float64 on the CPU;
    ``flash`` with ``dropout`` is compared with the float64 computation of its own draw."""
    q, k, v, key_mask, position, grads = _inputs(case, dtype, device, seed)
    spec = BandSpec(case.window, case.dilations, case.causal, case.head_dim**-0.5, dropout, relative=case.relative)
    # Round the inputs to the tested dtype first: the comparison is of the computation.
    cast = lambda x: x.to(dtype).to(torch.float64)  # noqa: E731
    q, k, v = cast(q), cast(k), cast(v)
    if position is not None:
        position = PositionTerm(cast(position.query), cast(position.table))

    def on_device(x):
        return x.to(device, dtype)

    device_mask = None if key_mask is None else key_mask.to(device)
    device_position = None if position is None else PositionTerm(on_device(position.query), on_device(position.table))
    if backend == "kernel":
        fn = kernel_backend.kernel_band_attention
        reference = reference_band_attention
    elif dropout == 0:
        fn, reference = flash_backend.flash_band_attention, reference_band_attention
    else:
        draws = {}

        def fn(q_, k_, v_, mask_, spec_, pos_):
            out, lse, draws["keep"] = flash_backend.attention_with_draws(q_, k_, v_, mask_, spec_)
            return out, lse

        def reference(q_, k_, v_, mask_, spec_, pos_):
            return dropped_reference(q_, k_, v_, mask_, spec_, draws["keep"].cpu())

    got = _run(fn, on_device(q), on_device(k), on_device(v), device_mask, device_position, spec, grads)
    name, dtype_name, tolerance = _case_name(case, dropout), str(dtype).replace("torch.", ""), TOLERANCES[dtype]
    if devices.rehearsing(device):  # the rehearsal's tensors hold no values: the calls ran, nothing to compare
        return CaseResult(name, dtype_name, {}, tolerance, True, backend, dropout)
    expected = _run(reference, q, k, v, key_mask, position, spec, grads)  # after: a dropout's draw is known
    rows = torch.ones(q.shape[0], q.shape[2], dtype=torch.bool) if key_mask is None else ~key_mask
    errors = {}
    for output, want in expected.items():
        have = got[output].detach().to("cpu", torch.float64)
        if output in ("out", "lse", "dq", "dpos_query"):  # padded query rows are the caller's to zero
            mask = rows[:, None, :, None] if want.dim() == 4 else rows[:, None, :]
            want, have = want * mask, have * mask
        errors[output] = float((have - want).abs().max()) if want.numel() else 0.0
        if not torch.isfinite(have).all():
            errors[output] = float("inf")
    # Gradients sum over the window: scale the tolerance with the magnitude they reach.
    scale = {output: max(1.0, float(want.abs().max())) for output, want in expected.items()}
    passed = all(err <= tolerance * scale[output] for output, err in errors.items())
    return CaseResult(name, dtype_name, errors, tolerance, passed, backend, dropout)


def _case_name(case: Case, dropout: float) -> str:
    return case.name + (f" dropout={dropout:g}" if dropout else "")


def _checked(case: Case, dtype: torch.dtype, device: torch.device, seed: int, backend: str, dropout: float):
    """:func:`check_case`, or a failed result naming what the backend raised."""
    try:
        return check_case(case, dtype, device, seed, backend, dropout)
    except Exception as err:  # noqa: BLE001 (any failure of the backend is the check's finding)
        error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        dtype_name = str(dtype).replace("torch.", "")
        return CaseResult(_case_name(case, dropout), dtype_name, {}, TOLERANCES[dtype], False, backend, dropout, error)


def jobs_for(device: torch.device, dtypes: Iterable[torch.dtype], cases: Iterable[Case]) -> list[tuple]:
    """``(case, dtype, backend, dropout)`` for every check on ``device``: the kernels in each
    dtype; on CUDA where torch has FlashAttention's window, ``flash`` on the cases without
    the position term, in half precision, without and with dropout."""
    dtypes, cases = list(dtypes), list(cases)
    jobs = [(case, dtype, "kernel", 0.0) for dtype in dtypes for case in cases]
    if devices.on_gpu(device) and flash_backend.unavailable_reason() is None:
        jobs += [
            (case, dtype, "flash", dropout)
            for dropout in FLASH_DROPOUTS
            for dtype in dtypes
            if dtype in FLASH_DTYPES
            for case in cases
            if not case.relative
        ]
    return jobs


def run_check(
    device: torch.device | str,
    dtypes: Iterable[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16),
    cases: Iterable[Case] = CASES,
    progress: Callable[[Iterable], Iterable] = lambda it: it,
) -> CheckReport:
    """Every case in every dtype (and ``flash``'s, on CUDA); the report says what passed.

    A case whose backend raises is a failed case with the error: on a GPU that is a backend
    ``auto`` must pass over, not a check that stops.
    """
    device = torch.device(device)
    jobs = jobs_for(device, dtypes, cases)
    results = [
        _checked(case, dtype, device, seed, backend, dropout)
        for seed, (case, dtype, backend, dropout) in enumerate(progress(jobs))
    ]
    return CheckReport(
        records.device_name(device),
        build_id(),
        torch.__version__,
        all(r.passed for r in results),
        time.strftime("%Y-%m-%dT%H:%M:%S"),
        results,
    )


def save_report(report: CheckReport, timings: dict | None = None) -> Path:
    """Record the report for its device and build, with ``timings`` (``{dtype: {kind:
    {backend: ms}}}``) when given; returns the records file."""
    summary = {k: v for k, v in asdict(report).items() if k != "results"}
    summary["cases"] = sum(r.backend == "kernel" for r in report.results)
    # "passed" and "failures" are the kernels' (what auto trusts them by); each backend's verdict beside.
    summary["passed"] = report.backend_passed().get("kernel", report.passed)
    summary["failures"] = [asdict(r) for r in report.failures if r.backend == "kernel"]
    summary["backends"] = report.backend_passed()
    if timings:
        summary["timings"] = timings
    return records.save_record(report.device, report.build, summary)
