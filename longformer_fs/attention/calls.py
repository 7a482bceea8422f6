"""Which backend each band-attention call took: what benchmarks and the report name.

``auto`` resolves a backend per kind of call, and a backend may hand a call it cannot
compute to another (``flex`` to ``chunks``). Inside :func:`backend_calls`, every call is
counted under the backend that computed it, so a benchmark's result can say what a
user's training would run, not what it asked for.

Counting costs one check of an empty list per call when nothing listens. Under
``torch.compile`` nothing is counted (a traced side effect would run once per trace, not
per call): a compiled region is counted by the eager calls around it only.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Iterator

import torch

from .spec import BandSpec

_LISTENERS: list[Counter] = []


def record(backend: str, spec: BandSpec) -> None:
    """Count one call on ``backend``, keyed ``"backend (kind)"``: ``plain`` or ``relative``,
    and ``+ dropout`` when the call drops probabilities. Each backend's entry point calls it
    when it computes the call itself."""
    if _LISTENERS and not torch.compiler.is_compiling():
        kind = ("relative" if spec.relative else "plain") + (" + dropout" if spec.dropout_p else "")
        for counts in _LISTENERS:
            counts[f"{backend} ({kind})"] += 1


@contextlib.contextmanager
def backend_calls() -> Iterator[Counter]:
    """Count the band-attention calls made inside: ``{"backend (kind)": calls}``."""
    counts: Counter = Counter()
    _LISTENERS.append(counts)
    try:
        yield counts
    finally:
        _LISTENERS.remove(counts)
