"""``longformer-fs sample``: text written by a character-LM checkpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import add_device_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Continue a prompt with a longformer_lm checkpoint and print only the continuation. The prompt is "
        "read as its UTF-8 bytes, each mapped as prep text8/enwik8 maps it, after </s> (as eval-bpc's stream "
        "begins). fairseq's SequenceGenerator drives the model's incremental decoder: each layer keeps only "
        "the keys and values its window reaches, so every character costs the same however long the text. "
        "Sampling by default (--temperature, --top-k, --top-p; --seed repeats a run), or --greedy."
    )
    parser.add_argument("checkpoint", type=Path, help="a longformer_lm checkpoint (checkpoint_last.pt, ...)")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="the prep directory holding its dict.txt (default: the data the checkpoint was trained on)",
    )
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the text to continue")
    prompt.add_argument("--prompt-file", type=Path, help="a UTF-8 file holding the text to continue")
    parser.add_argument("--max-new", type=int, required=True, help="characters (bytes) to write")
    parser.add_argument("--greedy", action="store_true", help="the most likely character each time, no sampling")
    parser.add_argument("--beam", type=int, default=1, help="with --greedy: beam search over this many hypotheses")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--top-k", type=int, default=-1, help="sample among the k most likely (-1: all)")
    parser.add_argument("--top-p", type=float, default=-1.0, help="sample among the most likely of mass p (-1: all)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling, for a run that repeats")
    add_device_argument(parser)


def main(args: argparse.Namespace) -> int:
    from ..hub import from_pretrained
    from ..hub.char_lm import CharLMHubInterface

    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise FileNotFoundError(f"--prompt-file: {args.prompt_file} does not exist")
        args.prompt = args.prompt_file.read_text(encoding="utf-8")
    if args.beam != 1 and not args.greedy:
        raise ValueError("--beam: beam search keeps the most likely continuations; give --greedy with it")
    hub = from_pretrained(args.checkpoint, data_name_or_path=args.data)
    if not isinstance(hub, CharLMHubInterface):
        raise ValueError(f"checkpoint: {args.checkpoint} is not a character LM (longformer_lm); sample writes with one")
    text = hub.to(args.device).sample(
        args.prompt, args.beam, max_new=args.max_new, greedy=args.greedy, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed,
    )  # fmt: skip
    sys.stdout.write(text + "\n")
    return 0
