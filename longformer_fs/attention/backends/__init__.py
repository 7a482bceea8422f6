"""Registry of band-attention backends, and how ``"auto"`` chooses among them.

Every backend implements the same internal contract, in heads-first layout::

    fn(q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None) -> (out, lse)

- ``q, k, v``: ``(B, H, T, D)``, any floating dtype; the backend computes in
  :func:`~longformer_fs.attention.dense.compute_dtype` (fp32 at least).
- ``key_mask``: ``(B, T)`` bool or None, True for keys to drop from every band
  (padding, and global tokens when the layer attends them separately).
- ``spec``: window, per-head dilations, causal, scale, dropout (:class:`~..spec.BandSpec`).
- ``position``: a relative-position term, passed only when ``spec.relative``.
- returns ``out`` ``(B, H, T, D)`` in the compute dtype and ``lse`` ``(B, H, T)``, the
  log-sum-exp of each row's scaled scores; rows with no key give 0 and -inf.

Query rows are not masked here: the caller zeroes padded rows.

``auto`` takes, per device, the first backend in :data:`AUTO_ORDER` that is available,
computes the call (``supports``: the backends differ only in attention dropout) and is
trusted there: on CPU the kernels are tested in
CI; on CUDA they are used only once ``longformer-fs check`` has passed for that GPU and
extension build (:mod:`..kernel_check`). Each choice is logged once per process, with
its reason, at INFO.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ..spec import BandSpec
from . import flex, kernel
from .chunks import chunks_band_attention
from .reference import reference_band_attention

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backend:
    name: str
    fn: Callable
    summary: str
    unavailable_reason: Callable[[], str | None] = lambda: None
    # Whether the backend computes a call (e.g. dropout), given its spec and device.
    supports: Callable[[BandSpec, torch.device | None], bool] = lambda spec, device=None: True

    @property
    def available(self) -> bool:
        return self.unavailable_reason() is None


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("kernel", kernel.kernel_band_attention, "compiled C++/CUDA band kernels, memory O(T*D)",
                kernel.unavailable_reason, kernel.supports),
        Backend("flex", flex.flex_band_attention, "PyTorch FlexAttention with a block-sparse band (GPU; on CPU "
                "its dense reference path, forward only)", flex.unavailable_reason, flex.supports),
        Backend("chunks", chunks_band_attention, "blocked PyTorch, memory O(T*w)"),
        Backend("reference", reference_band_attention, "dense masked attention, O(T^2), for tests"),
    )
}  # fmt: skip

# "auto" takes the first usable backend in this order (fastest first), per device type.
AUTO_ORDER = {"cpu": ("kernel", "chunks"), "cuda": ("kernel", "flex", "chunks")}
# Why a backend is trusted on a device type without a check of its own.
_TRUSTED = {
    ("kernel", "cpu"): "the compiled CPU kernels, tested in CI against the float64 oracle",
    ("flex", "cuda"): "PyTorch-maintained FlexAttention",
    ("chunks", "cpu"): "blocked PyTorch",
    ("chunks", "cuda"): "blocked PyTorch",
}


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    return [name for name, b in BACKENDS.items() if b.available]


def _why_not(name: str, spec: BandSpec | None, device: torch.device) -> str | None:
    """Why ``auto`` passes over backend ``name`` for this call (None: it takes it)."""
    backend = BACKENDS[name]
    reason = backend.unavailable_reason()
    if reason is not None:
        return reason
    if spec is not None and not backend.supports(spec, device):
        return "it cannot compute this call (attention dropout)" if spec.dropout_p else "it cannot compute this call"
    if name == "kernel" and device.type == "cuda":
        from ..kernel_check import trusted  # the check module imports this registry

        ok, why = trusted(device)
        return None if ok else why
    return None


def choose_backend(spec: BandSpec | None, device: torch.device | str | None) -> tuple[Backend, str]:
    """``auto``'s choice for a call on ``device`` and the reason, e.g. for ``longformer-fs info``."""
    device = torch.device(device if device is not None else "cpu")
    order = AUTO_ORDER.get(device.type, AUTO_ORDER["cpu"])
    passed = []
    for name in order:
        why_not = _why_not(name, spec, device)
        if why_not is None:
            because = _TRUSTED.get((name, device.type))
            if name == "kernel" and device.type == "cuda":
                because = kernel_check_reason(device)
            reason = f"{name} on {device.type}: {because}"
            if passed:
                reason += " (passed over " + "; ".join(passed) + ")"
            return BACKENDS[name], reason
        passed.append(f"{name}: {why_not}")
    raise RuntimeError(f"no attention backend can run this call on {device}: " + "; ".join(passed))


def kernel_check_reason(device: torch.device) -> str:
    from ..kernel_check import trusted

    return trusted(device)[1]


_LOGGED: set[tuple[str, str]] = set()


@torch.compiler.assume_constant_result
def _auto_name(device_type: str, device_index: int, dropout: bool) -> str:
    """``auto``'s choice for calls of this kind, logged once per process and choice.

    The choice depends on the device and on whether the call has dropout only; under
    ``torch.compile`` it is a constant of the graph, made here in plain Python.
    """
    device = torch.device(device_type, device_index) if device_index >= 0 else torch.device(device_type)
    spec = BandSpec(0, (1,), False, 1.0, dropout_p=0.5 if dropout else 0.0)
    backend, reason = choose_backend(spec, device)
    if (backend.name, reason) not in _LOGGED:
        _LOGGED.add((backend.name, reason))
        logger.info("attention backend auto -> %s", reason)
    return backend.name


def get_backend(name: str, spec: BandSpec | None = None, device: torch.device | None = None) -> Backend:
    """Resolve a backend name (or ``"auto"``, given the call's ``spec`` and device when known)."""
    if name == "auto":
        device = torch.device(device) if device is not None else torch.device("cpu")
        index = device.index if device.index is not None else -1
        return BACKENDS[_auto_name(device.type, index, spec is not None and spec.dropout_p > 0)]
    if name not in BACKENDS:
        raise ValueError(
            f"backend: unknown attention backend {name!r}; choose 'auto' or one of {', '.join(available_backends())}"
        )
    backend = BACKENDS[name]
    reason = backend.unavailable_reason()
    if reason is not None:
        raise ValueError(
            f"backend: {name!r} is not available on this machine: {reason}. "
            f"Available: 'auto', {', '.join(repr(n) for n in available_backends())}"
        )
    return backend
