"""Registry of band-attention backends, and how ``"auto"`` chooses among them.

Every backend implements the same internal contract, declared as
:class:`~longformer_fs.attention.spec.BandAttentionFn`, in heads-first layout::

    fn(q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None) -> (out, lse)

- ``q, k, v``: ``(B, H, T, D)``, any floating dtype; the backend computes in
  :func:`~longformer_fs.attention.dense.compute_dtype` (fp32 at least).
- ``key_mask``: ``(B, T)`` bool or None, True for keys to drop from every band
  (padding, and global tokens when the layer attends them separately).
- ``spec``: window, per-head dilations, causal, scale, dropout (:class:`~..spec.BandSpec`).
- ``position``: a relative-position term, passed only when ``spec.relative``.
- returns ``out`` ``(B, H, T, D)`` in the compute dtype or in the input dtype, and
  ``lse`` ``(B, H, T)`` in the compute dtype, the log-sum-exp of each row's scaled
  scores; rows with no key give 0 and -inf.

Query rows are not masked here: the caller zeroes padded rows.

Each backend answers one question, :meth:`Backend.not_supported_reasons`: why it cannot
take a call (its availability here, its limits, and on a GPU what ``longformer-fs check``
found there, as the evidence says), as a list of reasons, empty when it can. ``auto``
passes over a backend with reasons, and logs them; a backend asked for by name refuses a
call it cannot compute (:meth:`Backend.cannot_compute`: all but the evidence, which
decides only what ``auto`` trusts) with the same reasons, in one line
(:func:`get_backend`), and so does its function. No backend hands a call to another:
one that fails on a call its reasons allowed (a compilation) raises
:class:`~longformer_fs.attention.spec.BackendFailed`, and ``auto`` records the failure
and chooses again (:func:`record_failure`).

``auto`` chooses per kind of call: device, input dtype, head dimension, and the spec's
fields that some backend's reasons read (:data:`Backend.reads`; dropout, the position
term, padding inside rows today), which are its cache key (:func:`choose_backend`):

- on CPU, the compiled kernels (tested in CI against the float64 oracle), else ``chunks``;
- on CUDA, the fastest backend that ``longformer-fs check`` measured on this GPU and
  extension build for that dtype and kind; the CUDA kernels are candidates only once that
  check has verified them. Without a measurement, ``flash`` where it can compute the call,
  then ``flex``, else ``chunks``.

What ``check`` verified and measured comes from above the core, as evidence
(:mod:`..evidence`): the plugin, when fairseq loads it, and the command line install the
records that ``check`` writes (:func:`longformer_fs.verification.use_records`). A plain
PyTorch user of :mod:`longformer_fs.attention` who never imports the plugin keeps the
default, no evidence: on a GPU ``auto`` takes its order, and never the CUDA kernels, which
nothing has verified there (:func:`~..evidence.use_evidence` installs other evidence).

Each choice is logged once per process, with its reason, at INFO.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ... import devices
from .. import evidence
from ..spec import BandAttentionFn, BandSpec, refusal
from ..tracing import constant_when_traced
from . import chunks, flash, flex, kernel, reference
from .chunks import chunks_band_attention
from .reference import reference_band_attention

logger = logging.getLogger(__name__)


def _no_limits(spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None) -> list:
    return []


def _no_records(device: torch.device) -> list:
    return []


@dataclass(frozen=True)
class Backend:
    name: str
    fn: BandAttentionFn
    summary: str
    # Query-key pairs the backend computes for one batch row of a call, (T, spec) -> int:
    # the tiles it visits times their size. Over the band's pairs, it predicts the cost of
    # a call on hardware that is not here.
    work: Callable[[int, BandSpec], int]
    unavailable_reason: Callable[[], str | None] = lambda: None
    # Why the backend cannot compute a call, (spec or None for any call, device, head
    # dimension, input dtype or None for any) -> reasons; empty when it can. Its function
    # refuses such a call with these reasons.
    limits: Callable[..., list[str]] = _no_limits
    # The BandSpec fields that ``limits`` reads: auto's choice is kept by their values.
    reads: frozenset[str] = frozenset()
    # Why what ``longformer-fs check`` found, as the evidence says (..evidence), rules the
    # backend out on a device (empty: it does not).
    record_reasons: Callable[[torch.device], list[str]] = _no_records
    # What a call of a kind reads besides its tensors, built ahead of it, (T, spec, padded,
    # device) -> prepared, which the backend's fn then takes as ``prepared=``: a compiled layer
    # builds it before its graph runs (None: the backend builds nothing per kind).
    prepare: Callable[[int, BandSpec, bool, torch.device], object] | None = None

    @property
    def available(self) -> bool:
        return self.unavailable_reason() is None

    def cannot_compute(
        self, spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None
    ) -> list[str]:
        """Why this backend cannot compute the call at all (empty: it can): not available
        here, or its limits. Asked for by name, it refuses the call with these."""
        unavailable = self.unavailable_reason()
        if unavailable is not None:
            return [f"not available here: {unavailable}"]
        return self.limits(spec, device, head_dim, dtype)

    def not_supported_reasons(
        self, spec: BandSpec | None, device: torch.device, head_dim: int, dtype: torch.dtype | None = None
    ) -> list[str]:
        """Why ``auto`` may not take this backend for the call (empty: it may): what it
        :meth:`cannot_compute`, and what ``check`` found on the device, as the evidence says
        (the CUDA kernels are auto's only once verified; ``check`` itself runs them by name)."""
        reasons = self.cannot_compute(spec, device, head_dim, dtype)
        return reasons + self.record_reasons(device) if self.available else reasons


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("flash", flash.flash_band_attention, "FlashAttention-2's sliding window from torch's aten, with "
                "dilation as segments (fp16/bf16 on CUDA; a dense stand-in on CPU, for tests)", flash.work,
                flash.unavailable_reason, flash.limits, flash.READS, flash.record_reasons),
        Backend("kernel", kernel.kernel_band_attention, "compiled C++/CUDA band kernels, memory O(T*D)",
                kernel.work, kernel.unavailable_reason, kernel.limits, kernel.READS, kernel.record_reasons),
        Backend("flex", flex.flex_band_attention, "PyTorch FlexAttention with a block-sparse band, compiled once "
                "for all lengths (GPU; on CPU its dense reference path, forward only)", flex.work,
                flex.unavailable_reason, flex.limits, flex.READS, prepare=flex.prepare),
        Backend("chunks", chunks_band_attention, "blocked PyTorch, memory O(T*w)", chunks.work),
        Backend("reference", reference_band_attention, "dense masked attention, O(T^2), for tests", reference.work),
    )
}  # fmt: skip

# Without a measurement, "auto" takes the first backend in this order that can compute the
# call, per device type. The CUDA kernels are last there: until `check` has timed them they
# are only the exact path, not a fast one.
AUTO_ORDER = {"cpu": ("kernel", "chunks"), "cuda": ("flash", "flex", "chunks", "kernel")}
# Why a backend is trusted on a device type without a check of its own.
_TRUSTED = {
    ("kernel", "cpu"): "the compiled CPU kernels, tested in CI against the float64 oracle",
    ("flash", "cuda"): "FlashAttention-2's window from torch's aten, the band's work in fp16/bf16 with dropout "
    "(no measurement of this GPU; `longformer-fs check` times the backends)",
    ("flex", "cuda"): "PyTorch-maintained FlexAttention (no measurement of this GPU; `longformer-fs check` "
    "times the backends)",
    ("chunks", "cpu"): "blocked PyTorch",
    ("chunks", "cuda"): "blocked PyTorch",
}
KINDS = ("plain", "relative")


def call_kind(spec: BandSpec) -> str:
    """``"relative"`` for calls with the position term, else ``"plain"``: ``check`` times both."""
    return "relative" if spec.relative else "plain"


# What an available backend runs on a CPU where that is not its own computation.
_ON_CPU = {
    "flash": "on CPU: its stand-in, the CUDA op's contract in dense PyTorch, for tests; auto never takes it",
}


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine, by name or for ``auto``.

    ``flash`` is among them on a CPU wherever torch has FlashAttention's window: there it
    runs its stand-in (:mod:`.flash_stand_in`), what the CUDA op computes in dense PyTorch,
    so that CI's tests (and a run on a CPU that asks for ``flash`` by name) take flash's own
    code path; ``auto`` never takes it on a CPU. :func:`backend_notes` says so for a listing.
    """
    return [name for name, b in BACKENDS.items() if b.available]


def backend_notes() -> dict[str, str]:
    """``{name: note}`` for the available backends whose computation on a CPU is not their
    own (``flash``'s stand-in), for listings such as ``longformer-fs info``'s."""
    return {name: note for name, note in _ON_CPU.items() if BACKENDS[name].available}


def why_not(
    name: str,
    spec: BandSpec | None,
    device: torch.device,
    head_dim: int,
    dtype: torch.dtype | None = None,
    failed: dict[str, str] | None = None,
) -> str | None:
    """Why ``auto`` passes over backend ``name`` for this call (None: it may take it): its
    reasons, and a failure on calls of this kind (``failed``: name -> what it raised)."""
    reasons = BACKENDS[name].not_supported_reasons(spec, device, head_dim, dtype)
    if failed and name in failed:
        reasons.append(f"it failed on a call of this kind ({failed[name]})")
    return "; ".join(reasons) or None


def choose_backend(
    spec: BandSpec | None,
    device: torch.device | str | None,
    dtype: torch.dtype = torch.float32,
    head_dim: int = 64,
    failed: dict[str, str] | None = None,
) -> tuple[Backend, str]:
    """``auto``'s choice for a call and the reason, e.g. for ``longformer-fs info``.

    Args:
        spec: the call (None: any call this device runs).
        device: where the tensors are.
        dtype: the input dtype, which ``check``'s measurements are kept by.
        head_dim: ``D`` (FlexAttention's GPU kernels need 16 or more).
        failed: backends that failed on calls of this kind, name -> what they raised.
    """
    device = torch.device(device if device is not None else "cpu")
    order = AUTO_ORDER.get(devices.kind(device), AUTO_ORDER["cpu"])
    candidates, passed = [], []
    for name in order:
        reason = why_not(name, spec, device, head_dim, dtype, failed)
        if reason is None:
            candidates.append(name)
        else:
            passed.append(f"{name}: {reason}")
    if not candidates:
        raise RuntimeError(f"no attention backend can run this call on {device}: " + "; ".join(passed))
    name, because = candidates[0], None
    if devices.on_gpu(device):
        kind = call_kind(spec) if spec is not None else "plain"
        times = evidence.current().times(device, dtype, kind)
        timed = sorted((n for n in candidates if n in times), key=times.get)
        if timed:
            name = timed[0]
            dtype_name = str(dtype).replace("torch.", "")
            because = (
                f"fastest that `longformer-fs check` measured here ({dtype_name}, {kind}: "
                + ", ".join(f"{n} {times[n]:.2f} ms" for n in timed)
                + ")"
            )
    if because is None:
        because = _TRUSTED.get((name, devices.kind(device)), "the first in auto's order that can compute the call")
        if name == "kernel" and devices.on_gpu(device):  # trusted only as `check` verified it: say when
            because = evidence.current().verdict("kernel", device).why
    reason = f"{name} on {devices.kind(device)}: {because}"
    if passed:
        reason += " (passed over " + "; ".join(passed) + ")"
    return BACKENDS[name], reason


_LOGGED: set[tuple[str, str]] = set()
# auto's choice per kind of call, made once per process: it is on every layer's path.
_CHOICES: dict[tuple, str] = {}
# Backends that failed on a kind of call, key -> {name: what it raised}: auto passes them over.
_FAILED: dict[tuple, dict[str, str]] = {}
# A named backend's answer per kind of call (None: it computes it), made once per process.
_REFUSALS: dict[tuple, str | None] = {}
_SPEC_READS: tuple[str, ...] | None = None  # spec_reads(), once worked out
# What auto decides on: this spec with the real call's values of the fields the backends read.
_ANY_CALL = BandSpec(0, (1,), False, 1.0)


def forget_choices() -> None:
    """Choose again on the next call (after ``check`` recorded new results, or a backend changed),
    and log each choice again: a process that chose before would otherwise not say so."""
    global _SPEC_READS
    _LOGGED.clear()
    _CHOICES.clear()
    _FAILED.clear()
    _REFUSALS.clear()
    _SPEC_READS = None


@constant_when_traced
def spec_reads() -> tuple[str, ...]:
    """The BandSpec fields that any backend's reasons read, sorted: what auto keys by. Worked
    out once (every layer's call asks); :func:`forget_choices` works it out again."""
    global _SPEC_READS
    if _SPEC_READS is None:
        _SPEC_READS = tuple(sorted(frozenset().union(*(b.reads for b in BACKENDS.values()))))
    return _SPEC_READS


def _kind_fields(spec: BandSpec | None) -> tuple:
    """``spec``'s values of :func:`spec_reads`, as ``((field, value), ...)``."""
    spec = spec if spec is not None else _ANY_CALL
    return tuple((name, getattr(spec, name)) for name in spec_reads())


@constant_when_traced
def _auto_name(device_type: str, device_index: int, dtype: str, head_dim: int, fields: tuple) -> str:
    """``auto``'s choice for calls of this kind, logged once per process and choice.

    The choice depends only on these arguments (``fields``: the spec's values that the
    backends' reasons read) and on whether the device takes the GPU's decisions
    (:func:`longformer_fs.devices.kind`: a rehearsal changes that for ``meta``); under
    ``torch.compile`` it is a constant of the graph, made here in plain Python.
    """
    key = (device_type, devices.kind(device_type), device_index, dtype, head_dim, fields)
    if key not in _CHOICES:
        device = torch.device(device_type, device_index) if device_index >= 0 else torch.device(device_type)
        spec = dataclasses.replace(_ANY_CALL, **dict(fields))
        backend, reason = choose_backend(spec, device, getattr(torch, dtype), head_dim, _FAILED.get(key))
        if (backend.name, reason) not in _LOGGED:
            _LOGGED.add((backend.name, reason))
            logger.info("attention backend auto -> %s", reason)
        _CHOICES[key] = backend.name
    return _CHOICES[key]


def _call_key(spec: BandSpec | None, device: torch.device | None, dtype: torch.dtype, head_dim: int) -> tuple:
    device = device if device is not None else torch.device("cpu")
    index = device.index if device.index is not None else -1
    return device.type, index, str(dtype).replace("torch.", ""), head_dim, _kind_fields(spec)


def record_failure(name: str, spec: BandSpec, q: torch.Tensor, error: BaseException) -> Backend:
    """``auto``'s answer to ``name`` failing on a call it chose it for: remember the failure
    for calls of this kind, say so, and choose again."""
    device_type, index, dtype, head_dim, fields = _call_key(spec, q.device, q.dtype, q.shape[-1])
    key = (device_type, devices.kind(device_type), index, dtype, head_dim, fields)
    _FAILED.setdefault(key, {})[name] = str(error).splitlines()[0]
    _CHOICES.pop(key, None)
    again = BACKENDS[_auto_name(device_type, index, dtype, head_dim, fields)]
    logger.warning("attention backend auto: %s failed on a call (%s); chose %s instead", name, error, again.name)
    return again


def check_name(name: str) -> None:
    """Refuse a name that is neither ``auto`` nor an available backend, in one line."""
    if name == "auto":
        return
    if name not in BACKENDS:
        raise ValueError(
            f"backend: unknown attention backend {name!r}; choose 'auto' or one of {', '.join(available_backends())}"
        )
    reason = BACKENDS[name].unavailable_reason()
    if reason is not None:
        raise ValueError(
            f"backend: {name!r} is not available on this machine: {reason}. "
            f"Available: 'auto', {', '.join(repr(n) for n in available_backends())}"
        )


def get_backend(name: str, spec: BandSpec | None = None, q: torch.Tensor | None = None) -> Backend:
    """Resolve a backend name, or ``"auto"`` given the call's ``spec`` and query ``(B, H, T, D)``.

    A backend asked for by name refuses a call it cannot compute, with its reasons."""
    if q is None:
        return backend_for(name, spec)
    return backend_for(name, spec, q.device, q.dtype, q.shape[-1])


@constant_when_traced
def _refusal(name: str, device_type: str, device_index: int, dtype: str, head_dim: int, fields: tuple) -> str | None:
    """Why ``name`` cannot compute calls of this kind, as the one line it raises (None: it can);
    a constant of a compiled graph, as auto's choice is."""
    key = (name, device_type, devices.kind(device_type), device_index, dtype, head_dim, fields)
    if key not in _REFUSALS:
        device = torch.device(device_type, device_index) if device_index >= 0 else torch.device(device_type)
        spec = dataclasses.replace(_ANY_CALL, **dict(fields))
        reasons = BACKENDS[name].cannot_compute(spec, device, head_dim, getattr(torch, dtype))
        _REFUSALS[key] = refusal(name, reasons) if reasons else None
    return _REFUSALS[key]


def backend_for(
    name: str,
    spec: BandSpec | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    head_dim: int = 64,
) -> Backend:
    """:func:`get_backend` for a call described by its query's device, dtype and head size
    (before the query exists: a compiled layer preparing its call)."""
    check_name(name)
    key = _call_key(spec, device, dtype, head_dim)
    if name == "auto":
        return BACKENDS[_auto_name(*key)]
    if spec is not None:
        refused = _refusal(name, *key)
        if refused is not None:
            raise ValueError(refused)
    return BACKENDS[name]
