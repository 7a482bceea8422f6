"""onnxruntime sessions on the CPU, as the serving modules open them."""

from __future__ import annotations

from pathlib import Path


def cpu_session(path: Path, threads: int | None = None):
    """An ``onnxruntime.InferenceSession`` of ``path`` on the CPU provider, with ``threads``
    intra-op threads (default: onnxruntime's own choice, one per physical core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
