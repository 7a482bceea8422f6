"""The source checkout this package runs from, for what only a checkout has.

``make install`` installs the package in place (editable), so the folder above it is the
checkout: its ``Makefile`` (the recipes' make targets), ``recipes/`` (the Hydra configs),
``tests/`` and ``docs/``. An installed copy elsewhere has none of them, and what needs one
says so in one line (:func:`path`) instead of failing somewhere inside.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class NoCheckout(FileNotFoundError):
    """What a command needs is only in a checkout of longformer-fs, and this installation is none."""


def path(relative: str, what: str) -> Path:
    """``ROOT / relative``, which ``what`` (for the message: "the GPU tests") needs.

    Raises:
        NoCheckout: it is not there.
    """
    found = ROOT / relative
    if not found.exists():
        raise NoCheckout(
            f"{what} needs {relative} of a longformer-fs checkout (`make install` installs the package in "
            f"one); this installation ({ROOT}) has none"
        )
    return found
