"""Benchmarks behind ``longformer-fs bench``; they print ratios measured side by side."""

import argparse
from pathlib import Path

from .. import output


def int_list(text: str) -> list[int]:
    """The argparse type of a comma-separated list of integers (``"1,2,4"`` -> ``[1, 2, 4]``);
    empty items are ignored, so ``"8,"`` is ``[8]``."""
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def write_results(out: Path, results) -> None:
    """Write ``results`` as ``out/results.json`` and say where."""
    output.write_json(out / "results.json", results)
    print(f"wrote {out / 'results.json'}")
