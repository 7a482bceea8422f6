"""``longformer-fs eval-bpc``: test BPC of a character-LM checkpoint (paper protocol)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm import tqdm

from .. import output
from ..evaluation.char_lm import score_checkpoint
from .options import add_device_argument, add_evaluation_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Bits per character with overlapping windows: each window of --window characters advances "
        "by --step and scores only its last --step characters (the first scores all it covers), so "
        "every character of the split is scored exactly once; the count is checked."
    )
    add_evaluation_arguments(
        parser,
        "a longformer_lm checkpoint (checkpoint_last.pt, ...)",
        "directory made by `longformer-fs prep`",
        split="test",
    )
    parser.add_argument("--window", type=int, default=32256, help="characters per window (paper: 32256)")
    parser.add_argument("--step", type=int, default=512, help="characters scored per window (paper: 512)")
    parser.add_argument("--batch-size", type=int, default=1, help="windows per forward pass")
    add_device_argument(parser, help="device to run the model on")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def main(args: argparse.Namespace) -> int:
    result, n_chars = score_checkpoint(
        args.checkpoint,
        args.data,
        args.split,
        args.window,
        args.step,
        args.batch_size,
        args.device,
        lambda it: tqdm(list(it), desc="eval-bpc", unit="batch"),
    )
    summary = {
        "checkpoint": str(args.checkpoint),
        "split": args.split,
        "bpc": result.bpc,
        "scored": result.scored,
        "split_chars": n_chars,
        "windows": result.windows,
        "window": args.window,
        "step": args.step,
    }
    print(
        f"{args.split} BPC {result.bpc:.4f} over {result.scored:,} characters "
        f"(= the split's {n_chars:,}; {result.windows} windows of {args.window}, step {args.step})"
    )
    if args.json:
        output.write_json(args.json, summary)
    return 0
