"""Which band backend is fastest on a device: the timings that ``longformer-fs check`` records
(:mod:`.kernel_check`) and ``auto`` reads (:mod:`.records`).

``auto`` on CUDA picks among the backends by these (see
:mod:`longformer_fs.attention.backends`). Each candidate (a backend that ``auto`` could
take for the call, the CUDA kernels only once verified) is timed forward+backward at one
representative shape per kind of call:

- ``plain``: bidirectional, the fine-tuning and LED shape;
- ``relative``: causal with the Transformer-XL position term, the character LM's.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .. import devices
from ..attention.backends import AUTO_ORDER, KINDS, why_not
from ..attention.band import band_width
from ..attention.functional import band_attention_with_lse
from ..attention.spec import BandSpec, PositionTerm


def median_time(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    repeat: int = 5,
    warmup: int = 1,
    budget_s: float | None = None,
) -> float:
    """Median wall time of ``fn()`` in seconds, synchronising the device around each call.

    ``budget_s`` caps the total time spent: slow configurations get fewer repeats.
    """
    device = torch.device(device)
    sync = devices.synchronize
    for _ in range(warmup):
        fn()
    sync(device)
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
    return statistics.median(times)


@dataclass(frozen=True)
class TimingShape:
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    window: int


# A 16K-token step with the paper's 512-token window on GPU; smaller on CPU, where a
# check has to stay quick.
SHAPES = {"cuda": TimingShape(1, 12, 16384, 64, 256), "cpu": TimingShape(1, 4, 2048, 64, 128)}


def _spec(kind: str, shape: TimingShape) -> BandSpec:
    relative = kind == "relative"
    return BandSpec(shape.window, (1,) * shape.heads, relative, shape.head_dim**-0.5, relative=relative)


def candidates(device: torch.device, kind: str, head_dim: int, dtype: torch.dtype | None = None) -> list[str]:
    """The backends ``auto`` could take for calls of ``kind`` in ``dtype`` on ``device``."""
    spec = _spec(kind, SHAPES.get(devices.kind(device), SHAPES["cpu"]))
    order = AUTO_ORDER.get(devices.kind(device), AUTO_ORDER["cpu"])
    return [name for name in order if why_not(name, spec, device, head_dim, dtype) is None]


def time_backend(
    name: str, kind: str, shape: TimingShape, dtype: torch.dtype, device: torch.device, repeat: int = 5
) -> float:
    """Median forward+backward milliseconds of backend ``name``."""
    spec = _spec(kind, shape)
    gen = torch.Generator().manual_seed(0)
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    q, k, v = (torch.randn(dims, generator=gen).to(device, dtype).requires_grad_() for _ in range(3))
    position = None
    if spec.relative:
        table = torch.randn(shape.heads, band_width(spec.window, spec.causal), shape.head_dim, generator=gen) * 0.1
        position = PositionTerm(q, table.to(device, dtype).requires_grad_())

    def step():
        out, lse = band_attention_with_lse(q, k, v, None, spec, name, position)
        (out.float().sum() + lse.float().sum()).backward()

    # Two warm-up steps: the first may compile (flex), the second settles the allocator.
    return 1e3 * median_time(step, device, repeat=repeat, warmup=2)


def measure_backends(
    device: torch.device,
    dtypes: Iterable[torch.dtype],
    shape: TimingShape | None = None,
    progress: Callable[[Iterable], Iterable] = lambda it: it,
) -> dict:
    """``{dtype: {kind: {backend: ms}}}`` for every candidate; a backend that fails to run
    is left out (and so never chosen)."""
    shape = shape or SHAPES.get(devices.kind(device), SHAPES["cpu"])
    jobs = [
        (dtype, kind, name)
        for dtype in dtypes
        for kind in KINDS
        for name in candidates(device, kind, shape.head_dim, dtype)
    ]
    timings: dict = {}
    for dtype, kind, name in progress(jobs):
        try:
            ms = time_backend(name, kind, shape, dtype, device)
        except (RuntimeError, ValueError) as err:  # e.g. out of memory: not a candidate here
            print(f"  {name} ({kind}, {dtype}) could not be timed: {str(err).splitlines()[0]}")
            continue
        timings.setdefault(str(dtype).replace("torch.", ""), {}).setdefault(kind, {})[name] = round(ms, 3)
    return timings
