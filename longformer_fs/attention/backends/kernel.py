"""The "kernel" backend slot: the compiled band kernels of ``cuda_ext/``.

The extension and its autograd binding do not exist yet, so this backend reports itself
unavailable and ``"auto"`` resolves to ``"chunks"``.
"""

from __future__ import annotations


def unavailable_reason() -> str | None:
    """Why the kernel backend cannot run here (None once it can)."""
    return "the cuda_ext band kernels are not part of this build yet"
