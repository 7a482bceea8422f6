"""onnxruntime sessions on the CPU, as the serving modules open them."""

from __future__ import annotations

from pathlib import Path


def cpu_session(path: Path, threads: int | None = None):
    """An ``onnxruntime.InferenceSession`` of ``path`` on the CPU provider, with ``threads``
    intra-op threads (default: onnxruntime's own choice, one per physical core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # Our files' shapes are computed at run time. With a memory pattern, onnxruntime lays
    # out the second run's tensors as one new block beside what its arena already holds
    # from the first: about twice the memory for good (2.4 GiB against 1.3 GiB over the
    # loaded model, 16K tokens, two layers).
    options.enable_mem_pattern = False
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
