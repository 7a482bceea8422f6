"""What ``longformer-fs check`` verified and measured on a device: the records ``auto`` reads.

One JSON file under the cache directory (``$LONGFORMER_FS_CACHE``, else
``~/.cache/longformer_fs``) holds a record per device name and extension build:

- whether the compiled kernels passed the float64 check there (a rebuilt extension is a
  new build and must be checked again);
- the forward+backward time of each backend that can run there, per input dtype and per
  kind of call (``plain``, or ``relative`` with the position term), at one representative
  shape, and so the fastest.

The core never reads this file: :class:`Records` answers its questions
(:class:`~longformer_fs.attention.evidence.Evidence`) from it, and :func:`use_records`
installs it, as the plugin and the command line do. This module imports neither the check
nor the timings, so both can import it.
"""

from __future__ import annotations

import json
import os
import platform
from functools import lru_cache
from pathlib import Path

import torch

from .. import devices, output
from ..attention.backends import forget_choices
from ..attention.backends import kernel as kernel_backend
from ..attention.evidence import NEVER_CHECKED, Verdict, use_evidence

RECORDS = "kernel_checks.json"


def cache_dir() -> Path:
    return Path(os.environ.get("LONGFORMER_FS_CACHE") or Path.home() / ".cache" / "longformer_fs")


def records_path() -> Path:
    return cache_dir() / RECORDS


def device_name(device: torch.device | str) -> str:
    """What a record is keyed by: the GPU's name (a bare ``cuda``: the current one's), or the CPU's."""
    device = torch.device(device)
    if devices.on_gpu(device):
        return devices.gpu_name(device)
    return f"cpu {platform.machine()} {platform.processor() or ''}".strip()


def record_key(device: str, build: str) -> str:
    return f"{device} | build {build}"


def load_records() -> dict:
    try:
        return json.loads(records_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def save_record(device: str, build: str, record: dict) -> Path:
    """Write (replace) the record of ``device`` and ``build``; returns the records file."""
    path = records_path()
    records = load_records()
    records[record_key(device, build)] = record
    output.write_json(path, records)
    _record.cache_clear()
    forget_choices()  # auto's choices were made on the old records
    return path


@lru_cache(maxsize=None)
def _record(device: str, build: str) -> dict | None:
    return load_records().get(record_key(device, build))


def record_for(device: torch.device, build: str) -> dict | None:
    """The record of this GPU (or CPU) and build, read once per process and file write."""
    return _record(device_name(device), build)


def _verdict(backend: str, name: str, build: str) -> Verdict:
    """What the record of GPU (or CPU) ``name`` and ``build`` says of ``backend``."""
    record = _record(name, build)
    if record is None:
        return NEVER_CHECKED
    if backend == "kernel":  # the record's "passed" and "failures" are the kernels'
        if not record["passed"]:
            return Verdict(
                False,
                f"`longformer-fs check` failed on {name} for this build ({len(record['failures'])} of "
                f"{record['cases']} cases, {record['when']})",
            )
        return Verdict(True, f"`longformer-fs check` passed on {name} for this build ({record['when']})")
    passed = record.get("backends", {}).get(backend)
    if passed is None:
        return NEVER_CHECKED
    if not passed:
        return Verdict(False, f"`longformer-fs check` found it wrong on {name} ({record['when']})")
    return Verdict(True, f"`longformer-fs check` passed it on {name} ({record['when']})")


def measured_times(device: torch.device, build: str, dtype: torch.dtype, kind: str) -> dict[str, float]:
    """``{backend: milliseconds}`` that ``check`` measured here for ``dtype`` and ``kind``
    (empty when it measured nothing)."""
    record = record_for(device, build) or {}
    return dict(record.get("timings", {}).get(str(dtype).replace("torch.", ""), {}).get(kind, {}))


def clear_cache() -> None:
    _record.cache_clear()


class Records:
    """The core's :class:`~longformer_fs.attention.evidence.Evidence`, read from the records
    of this device and of the extension's build now (a rebuild has none until checked)."""

    def verdict(self, backend: str, device: torch.device) -> Verdict:
        return _verdict(backend, device_name(device), kernel_backend.build_id())

    def times(self, device: torch.device, dtype: torch.dtype, kind: str) -> dict[str, float]:
        return measured_times(device, kernel_backend.build_id(), dtype, kind)


def use_records() -> None:
    """Make ``auto`` read what ``check`` recorded (idempotent; the file is read once per
    process and write)."""
    use_evidence(Records())
