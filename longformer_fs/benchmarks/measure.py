"""Timing, peak memory, isolated child processes, and the device and precision a benchmark
runs in, for CPU and CUDA.

CPU torch keeps no allocator statistics, so on CPU the peak comes from the profiler's
allocation events: the running sum of allocated minus freed bytes, maximised. It counts
tensor storage made by torch ops (not Python or library overhead), which is what a
"never allocates T x T" check needs.

A measurement that may outgrow RAM runs in a child process (:func:`run_isolated`), this
module run as ``python -m``. The training settings of the end-to-end benches' recipes are
:mod:`.recipe_training`'s; what one training step ran, :mod:`.step_profile`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from .. import devices
from ..verification.backend_speed import median_time  # noqa: F401 (the calibration's timer, every bench's too)


@contextlib.contextmanager
def quiet_native_stderr():
    """Kineto prints a line on every profiler start/stop from C++; hide just those."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def event_name(event) -> str | None:
    """A kineto event's name; None for one whose name is not UTF-8 (a Python frame's, seen
    with ``with_stack=True``)."""
    try:
        return event.name()
    except UnicodeDecodeError:
        return None


def cpu_peak(prof: profile) -> int:
    """The peak of live CPU tensor bytes over a profile taken with ``profile_memory=True``,
    counted from where it started.

    A tensor allocated before the profile and freed during it (the previous step's
    gradients, which a backward replaces) is counted as if freed at once: below the start
    nothing is counted. Otherwise a call that frees old gradients before it allocates new
    ones of the same size would have a peak of 0 (seen on the kernel's causal step at 64
    tokens)."""
    events = [e for e in prof.profiler.kineto_results.events() if event_name(e) == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    cpu = torch._C._autograd.DeviceType.CPU
    live = peak = 0
    for event in events:
        if event.device_type() == cpu:
            live = max(0, live + event.nbytes())
            peak = max(peak, live)
    return peak


def peak_memory_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated while ``fn()`` runs, above what was live before."""
    device = torch.device(device)
    if devices.runs_kernels(device):
        devices.synchronize(device)
        devices.reset_peak_memory(device)
        base = devices.allocated_bytes(device)
        fn()
        devices.synchronize(device)
        return devices.peak_allocated_bytes(device) - base

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with quiet_native_stderr():
        prof.__enter__()
    try:
        fn()
    finally:
        with quiet_native_stderr():
            prof.__exit__(None, None, None)
    return cpu_peak(prof)


def run_isolated(function: str, threads: int, **kwargs) -> dict:
    """``function(**kwargs)`` (a ``module:name`` returning a JSON-able dict) in a child process.

    The kernel's OOM killer ends a process that outgrows RAM without an exception, so
    large measurements run apart and a kill is reported as a result (``{"error": ...}``).
    The child is ``python -m`` of this module (:func:`_isolated_main`), as a launcher or a
    warm start recognises it, rather than ``python -c`` code.
    """
    command = [sys.executable, "-m", __spec__.name, function, str(threads), json.dumps(kwargs)]
    proc = subprocess.run(command, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    reason = "killed: out of memory" if proc.returncode in (-9, 137) else proc.stderr.strip()[-200:]
    return {"error": reason}


def _isolated_main(argv: list[str]) -> None:
    """The child of :func:`run_isolated`: ``FUNCTION THREADS KWARGS_JSON``; prints ``RESULT {...}``."""
    import importlib

    function, threads, kwargs = argv
    torch.set_num_threads(int(threads))
    module, name = function.split(":")
    result = getattr(importlib.import_module(module), name)(**json.loads(kwargs))
    print("RESULT", json.dumps(result), flush=True)


# ------------------------------------------------------------------------ precision

# The dtype of each precision a step can train in (None: float32 throughout).
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def add_device_arguments(parser, precision: bool = True) -> None:
    """``--device``, and ``--fp16`` / ``--bf16`` for mixed precision: one set for every benchmark.

    Without ``precision``, ``--device`` alone: a bench that trains as a recipe takes its
    precision flags from :func:`.recipe_training.add_training_arguments` instead.
    """
    parser.add_argument("--device", default=devices.default_device(), help="cpu, cuda or cuda:N")
    if not precision:
        return
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--fp16", action="store_true", help="autocast to float16 (CUDA; as fairseq's --fp16)")
    group.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (CUDA; as fairseq's --bf16)")


def precision_of(args) -> str:
    """``fp16``, ``bf16`` or ``fp32`` from the parsed arguments; half precision needs CUDA."""
    precision = "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32"
    check_device(args.device, precision)
    return precision


def check_device(device: str, precision: str) -> None:
    """Refuse a half ``precision`` off CUDA, and a CUDA ``device`` where none is visible."""
    if precision != "fp32" and not devices.on_gpu(device):
        raise ValueError(f"--{precision} needs --device cuda")
    if devices.on_gpu(device) and not devices.cuda_runtime():
        raise ValueError("--device: no CUDA device is visible here (torch.cuda.is_available() is False)")


def autocast(device: torch.device | str, precision: str):
    """The context a training step of ``precision`` runs its forward in (HF's Trainer: autocast)."""
    return devices.autocast(device, PRECISIONS[precision])


def cast_as_fairseq(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """``model`` as fairseq's trainer makes it for ``precision``: ``--fp16`` and ``--bf16``
    cast the whole model (weights and activations; fp32 master weights live in the
    optimizer, outside the step); float32 leaves it."""
    dtype = PRECISIONS[precision]
    return model if dtype is None else model.to(dtype)


if __name__ == "__main__":
    _isolated_main(sys.argv[1:])
