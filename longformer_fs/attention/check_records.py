"""What ``longformer-fs check`` verified and measured on a device: the records ``auto`` reads.

One JSON file under the cache directory (``$LONGFORMER_FS_CACHE``, else
``~/.cache/longformer_fs``) holds a record per device name and extension build:

- whether the compiled kernels passed the float64 check there (a rebuilt extension is a
  new build and must be checked again);
- the forward+backward time of each backend that can run there, per input dtype and per
  kind of call (``plain``, or ``relative`` with the position term), at one representative
  shape, and so the fastest.

This module only reads and writes records; it imports neither the backend registry nor
the check, so both can import it.
"""

from __future__ import annotations

import json
import os
import platform
from functools import lru_cache
from pathlib import Path

import torch

from .. import devices

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
    path.parent.mkdir(parents=True, exist_ok=True)
    records = load_records()
    records[record_key(device, build)] = record
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=2))
    tmp.replace(path)
    _record.cache_clear()
    return path


@lru_cache(maxsize=None)
def _record(device: str, build: str) -> dict | None:
    return load_records().get(record_key(device, build))


def record_for(device: torch.device, build: str) -> dict | None:
    """The record of this GPU (or CPU) and build, read once per process and file write."""
    return _record(device_name(device), build)


def kernels_verified(device: torch.device, build: str) -> tuple[bool, str]:
    """Whether the CUDA kernels passed ``check`` on this GPU with this build, and why."""
    name = device_name(device)
    record = _record(name, build)
    if record is None:
        return False, (
            f"the CUDA kernels are not verified on {name} for this build; run "
            "`longformer-fs check --device cuda` to verify them"
        )
    if not record["passed"]:
        return False, (
            f"`longformer-fs check` failed on {name} for this build ({len(record['failures'])} of "
            f"{record['cases']} cases, {record['when']})"
        )
    return True, f"`longformer-fs check` passed on {name} for this build ({record['when']})"


def check_failed(device: torch.device, build: str, backend: str) -> str | None:
    """Why ``auto`` should not trust ``backend`` on this GPU: its last ``check`` there failed
    (None: it passed, or was never checked)."""
    name = device_name(device)
    record = _record(name, build)
    if record is None or record.get("backends", {}).get(backend, True):
        return None
    return f"`longformer-fs check` found it wrong on {name} ({record['when']})"


def measured_times(device: torch.device, build: str, dtype: torch.dtype, kind: str) -> dict[str, float]:
    """``{backend: milliseconds}`` that ``check`` measured here for ``dtype`` and ``kind``
    (empty when it measured nothing)."""
    record = record_for(device, build) or {}
    return dict(record.get("timings", {}).get(str(dtype).replace("torch.", ""), {}).get(kind, {}))


def clear_cache() -> None:
    _record.cache_clear()
