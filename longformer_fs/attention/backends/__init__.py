"""Registry of band-attention backends.

Every backend implements the same internal contract, in heads-first layout::

    fn(q, k, v, key_mask, spec: BandSpec, position: PositionTerm | None) -> (out, lse)

- ``q, k, v``: ``(B, H, T, D)``, any floating dtype; the backend computes in
  :func:`~longformer_fs.attention.dense.compute_dtype` (fp32 at least).
- ``key_mask``: ``(B, T)`` bool or None, True for keys to drop from every band
  (padding, and global tokens when the layer attends them separately).
- ``spec``: window, per-head dilations, causal, scale, dropout (:class:`~..spec.BandSpec`).
- ``position``: a relative-position term, passed only when ``spec.relative``; backends
  without it say so through ``supports``.
- returns ``out`` ``(B, H, T, D)`` in the compute dtype and ``lse`` ``(B, H, T)``, the
  log-sum-exp of each row's scaled scores; rows with no key give 0 and -inf.

Query rows are not masked here: the caller zeroes padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..spec import BandSpec
from . import kernel
from .chunks import chunks_band_attention
from .reference import reference_band_attention


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
        Backend(
            "kernel",
            kernel.kernel_band_attention,
            "compiled C++/CUDA band kernels, memory O(T*D)",
            kernel.unavailable_reason,
            kernel.supports,
        ),
        Backend("chunks", chunks_band_attention, "blocked PyTorch, memory O(T*w)"),
        Backend("reference", reference_band_attention, "dense masked attention, O(T^2), for tests"),
    )
}

# "auto" takes the first available in this order (fastest first).
AUTO_ORDER = ("kernel", "chunks")


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    return [name for name, b in BACKENDS.items() if b.available]


def get_backend(name: str, spec: BandSpec | None = None, device: torch.device | None = None) -> Backend:
    """Resolve a backend name (or ``"auto"``, given the call's ``spec`` and device when known)."""
    if name == "auto":
        return next(
            BACKENDS[n]
            for n in AUTO_ORDER
            if BACKENDS[n].available and (spec is None or BACKENDS[n].supports(spec, device))
        )
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
