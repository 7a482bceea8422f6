"""What ``auto`` is told about the backends on a device, beyond what they say of themselves.

The core can prove nothing about a GPU it does not run on: whether the CUDA kernels are
right there, and which backend is fastest, are found by a check that runs above it
(``longformer-fs check``, :mod:`longformer_fs.verification`). The core asks two questions
of an :class:`Evidence` and is given the answers (:func:`use_evidence`):

- :meth:`Evidence.verdict`: did ``check`` pass a backend on this device, fail it (and why),
  or never check it;
- :meth:`Evidence.times`: the forward+backward milliseconds it measured per backend.

By default there is no evidence (:data:`NO_EVIDENCE`): nothing was checked and nothing
timed, so ``auto`` on a GPU takes its order and never the CUDA kernels. A plain-PyTorch
user of :mod:`longformer_fs.attention` keeps that default; the plugin, when fairseq loads
it, and the command line install what ``check`` recorded
(:func:`longformer_fs.verification.use_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class Verdict:
    """What ``check`` found of one backend on one device.

    ``passed``: True or False, or None where it never checked the backend there; ``why``:
    a phrase for a reason, e.g. "`longformer-fs check` failed on GPU for this build (2 of 7
    cases, 2026-01-01T00:00:00)" (empty when never checked: the backend says that itself).
    """

    passed: bool | None
    why: str = ""


NEVER_CHECKED = Verdict(None)


class Evidence(Protocol):
    """The two questions the backends and ``auto`` ask of a check's results."""

    def verdict(self, backend: str, device: torch.device) -> Verdict:
        """What ``check`` found of ``backend`` on ``device`` with this build of the extension."""

    def times(self, device: torch.device, dtype: torch.dtype, kind: str) -> dict[str, float]:
        """``{backend: milliseconds}``, forward+backward, that ``check`` measured on ``device``
        for inputs of ``dtype`` and calls of ``kind`` (``"plain"`` or ``"relative"``); empty
        where it measured nothing."""


class _NoEvidence:
    def verdict(self, backend: str, device: torch.device) -> Verdict:
        return NEVER_CHECKED

    def times(self, device: torch.device, dtype: torch.dtype, kind: str) -> dict[str, float]:
        return {}


NO_EVIDENCE: Evidence = _NoEvidence()
_evidence: Evidence = NO_EVIDENCE


def current() -> Evidence:
    """The evidence ``auto`` reads now."""
    return _evidence


def use_evidence(evidence: Evidence) -> Evidence:
    """Make ``auto`` read ``evidence`` from its next choice on; returns the evidence it read
    before (to put back)."""
    global _evidence
    from . import backends  # the registry imports this module: its choices are forgotten here

    previous, _evidence = _evidence, evidence
    backends.forget_choices()
    return previous
