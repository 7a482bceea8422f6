"""Timing and peak-memory measurement for CPU and CUDA.

CPU torch keeps no allocator statistics, so on CPU the peak comes from the profiler's
allocation events: the running sum of allocated minus freed bytes, maximised. It counts
tensor storage made by torch ops (not Python or library overhead), which is what a
"never allocates T x T" check needs.
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

from ..attention.backend_speed import median_time  # noqa: F401 (the calibration's timer, every bench's too)


@contextlib.contextmanager
def _quiet_native_stderr():
    """Kineto prints a line on every profiler start/stop from C++; hide just those."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated while ``fn()`` runs, above what was live before."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_native_stderr():
        prof.__enter__()
    try:
        fn()
    finally:
        with _quiet_native_stderr():
            prof.__exit__(None, None, None)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    cpu = torch._C._autograd.DeviceType.CPU
    live = peak = 0
    for event in events:
        if event.device_type() == cpu:
            live += event.nbytes()
            peak = max(peak, live)
    return peak


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


# Mixed precision as fairseq's --fp16 / --bf16 train: autocast, fp32 master weights.
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def add_device_arguments(parser) -> None:
    """``--device``, and ``--fp16`` / ``--bf16`` for mixed precision: one set for every benchmark."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu, cuda or cuda:N")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--fp16", action="store_true", help="autocast to float16 (CUDA; as fairseq's --fp16)")
    group.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (CUDA; as fairseq's --bf16)")


def precision_of(args) -> str:
    """``fp16``, ``bf16`` or ``fp32`` from the parsed arguments; half precision needs CUDA."""
    precision = "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32"
    if precision != "fp32" and torch.device(args.device).type != "cuda":
        raise ValueError(f"--{precision} needs --device cuda")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device: no CUDA device is visible here (torch.cuda.is_available() is False)")
    return precision


def autocast(device: torch.device | str, precision: str):
    """The context a training step of ``precision`` runs its forward in."""
    dtype = PRECISIONS[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(torch.device(device).type, dtype=dtype)


if __name__ == "__main__":
    _isolated_main(sys.argv[1:])
