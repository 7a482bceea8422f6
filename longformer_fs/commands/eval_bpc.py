"""``longformer-fs eval-bpc``: test BPC of a character-LM checkpoint (paper protocol)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    import torch

    parser.description = (
        "Bits per character with overlapping windows: each window of --window characters advances "
        "by --step and scores only its last --step characters (the first scores all it covers), so "
        "every character of the split is scored exactly once; the count is checked.")
    parser.add_argument("checkpoint", type=Path, help="a longformer_lm checkpoint (checkpoint_last.pt, ...)")
    parser.add_argument("--data", type=Path, required=True, help="directory made by `longformer-fs prep`")
    parser.add_argument("--split", default="test", help="split to score")
    parser.add_argument("--window", type=int, default=32256, help="characters per window (paper: 32256)")
    parser.add_argument("--step", type=int, default=512, help="characters scored per window (paper: 512)")
    parser.add_argument("--batch-size", type=int, default=1, help="windows per forward pass")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="device to run the model on")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def load(checkpoint: Path, data: Path, device: str):
    from fairseq import checkpoint_utils

    if not checkpoint.is_file():
        raise FileNotFoundError(f"checkpoint: {checkpoint} does not exist")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                       arg_overrides={"data": str(data)})
    return models[0].to(device).eval(), task


def read_split(task, data: Path, split: str):
    import torch
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(data / split), task.source_dictionary, "mmap")
    if dataset is None:
        raise FileNotFoundError(f"--split: {data / split}.bin/.idx not found")
    return torch.cat([dataset[i] for i in range(len(dataset))]).long()


def score_checkpoint(checkpoint: Path, data: Path, split: str, window: int, step: int, batch_size: int,
                     device: str, progress=lambda it: it):
    """The protocol on one split; returns the result and the split's length (checked equal)."""
    import torch

    from longformer_fs.evaluation.sliding_window import sliding_window_bpc

    model, task = load(checkpoint, data, device)
    chars = read_split(task, data, split)

    def log_probs(inputs):
        with torch.no_grad():
            logits = model(inputs.to(device))[0]
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    result = sliding_window_bpc(log_probs, chars, task.source_dictionary.eos(), window, step, batch_size, progress)
    if result.scored != len(chars):
        raise RuntimeError(f"scored {result.scored} characters of {len(chars)}: the protocol is broken")
    return result, len(chars)


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    result, n_chars = score_checkpoint(args.checkpoint, args.data, args.split, args.window, args.step,
                                       args.batch_size, args.device,
                                       lambda it: tqdm(list(it), desc="eval-bpc", unit="batch"))
    summary = {"checkpoint": str(args.checkpoint), "split": args.split, "bpc": result.bpc,
               "scored": result.scored, "split_chars": n_chars, "windows": result.windows,
               "window": args.window, "step": args.step}
    print(f"{args.split} BPC {result.bpc:.4f} over {result.scored:,} characters "
          f"(= the split's {n_chars:,}; {result.windows} windows of {args.window}, step {args.step})")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0
