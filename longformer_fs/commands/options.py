"""Options and steps that several commands share, defined once.

- :func:`add_output_arguments`: ``--out`` and ``--force`` of the ``prep`` commands that
  build a dataset directory;
- :func:`add_evaluation_arguments`: the checkpoint, ``--data`` and ``--split`` of the
  ``eval-*`` commands; :func:`add_conversion_arguments`: the checkpoint and ``--out`` of
  the commands that write a converted model;
- :func:`add_split_arguments`: the ``--train/--valid/--test`` files, or one ``--input``
  to split by ``--valid-fraction``/``--test-fraction``; :func:`split_files`: the split
  files given;
- :func:`run_preparation`: run a preparation, timed, and print its stats table;
  :func:`print_done` closes its report;
- :func:`comma_triple`: an argument type for ``TRAIN,VALID,TEST`` numbers;
- :func:`add_device_argument`: ``--device``, CUDA when there is one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

SPLIT_NAMES = ("train", "valid", "test")


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` (required) and ``--force``, for a preparation that rebuilds only what changed."""
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date / write into a used dir")


def add_evaluation_arguments(
    parser: argparse.ArgumentParser, checkpoint_help: str, data_help: str, split: str = "valid"
) -> None:
    """``CHECKPOINT --data DIR [--split NAME]``: a checkpoint scored on a prepared split."""
    parser.add_argument("checkpoint", type=Path, help=checkpoint_help)
    parser.add_argument("--data", type=Path, required=True, help=data_help)
    parser.add_argument("--split", default=split, help="the split to score")


def add_conversion_arguments(parser: argparse.ArgumentParser, source: str, source_help: str, out_help: str) -> None:
    """``SOURCE --out DIR``: a checkpoint read, and the directory its conversion is written to."""
    parser.add_argument(source, type=Path, help=source_help)
    parser.add_argument("--out", type=Path, required=True, help=out_help)


def add_split_arguments(parser, files: str, input_help: str, items: str, fraction: float = 0.1) -> None:
    """``--train/--valid/--test FILE`` (help: "the SPLIT ``files``"), or ``--input FILE``
    (``input_help``) split by ``--valid-fraction`` and ``--test-fraction`` (default
    ``fraction`` each, of the ``items``: "examples", "pairs")."""
    for split in SPLIT_NAMES:
        parser.add_argument(f"--{split}", type=Path, metavar="FILE", help=f"the {split} {files}")
    parser.add_argument("--input", type=Path, metavar="FILE", help=f"instead of split files: {input_help}")
    for split in ("valid", "test"):
        parser.add_argument(
            f"--{split}-fraction",
            type=float,
            default=fraction,
            help=f"with --input: share of {items} for {split} (at least one when above 0)",
        )


def split_files(args: argparse.Namespace) -> dict[str, Path]:
    """``{split: path}`` of the ``--train/--valid/--test`` options given."""
    return {split: getattr(args, split) for split in SPLIT_NAMES if getattr(args, split) is not None}


def run_preparation(prepare: Callable, cfg, args: argparse.Namespace, stats_table: Callable) -> tuple[dict, float]:
    """``prepare(cfg, args.out, args.force)``, then its stats table printed.

    Returns:
        What ``prepare`` returned, and the seconds it took.
    """
    start = time.perf_counter()
    result = prepare(cfg, args.out, args.force)
    seconds = time.perf_counter() - start
    print(stats_table(result))
    return result, seconds


def print_done(args: argparse.Namespace, seconds: float) -> None:
    """The last line of a preparation's report: where it went, how long it took."""
    print(f"{args.out}: done in {seconds:.1f} s (stats in {args.out / 'stats.json'})")


def comma_triple(convert: Callable, valid: Callable[[tuple], bool], expected: str) -> Callable[[str], tuple]:
    """An argparse type for ``TRAIN,VALID,TEST``: three ``convert``-ed numbers that ``valid`` accepts.

    A bad value is an error that says ``expected TRAIN,VALID,TEST <expected>, got '<text>'``.
    """

    def parse(text: str) -> tuple:
        try:
            values = tuple(convert(x) for x in text.split(","))
        except ValueError:
            values = ()
        if len(values) != 3 or not valid(values):
            raise argparse.ArgumentTypeError(f"expected TRAIN,VALID,TEST {expected}, got {text!r}")
        return values

    return parse


def default_device() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_device_argument(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--device``, by default :func:`default_device`."""
    parser.add_argument("--device", default=default_device(), help=help)
