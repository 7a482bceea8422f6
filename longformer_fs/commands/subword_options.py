"""The tokenizer options every ``prep`` command shares: GPT-2 BPE or ``--spm``."""

from __future__ import annotations

import argparse
from pathlib import Path

from longformer_fs.tokenization import SubwordSpec


def add_subword_arguments(parser: argparse.ArgumentParser, model: str = "RoBERTa's") -> None:
    group = parser.add_argument_group(
        "tokenizer",
        f"GPT-2 byte-level BPE mapped through the model's dict.txt ({model}): give --encoder-json, --vocab-bpe and "
        "--dict. Or a SentencePiece model (--spm), for corpora and models that are not RoBERTa's: the dict.txt "
        "is written from its vocabulary, or --dict names the model's.",
    )
    group.add_argument("--encoder-json", type=Path, help="GPT-2's encoder.json")
    group.add_argument("--vocab-bpe", type=Path, help="GPT-2's vocab.bpe")
    group.add_argument("--spm", type=Path, metavar="MODEL", help="a SentencePiece model (.model) instead of GPT-2 BPE")
    group.add_argument("--dict", type=Path, help="the model's fairseq dict.txt (required with GPT-2 BPE)")


def subword_spec(args: argparse.Namespace) -> SubwordSpec:
    """The encoder the options name; a ValueError that says what is missing."""
    gpt2 = [args.encoder_json, args.vocab_bpe]
    if args.spm is not None:
        if any(gpt2):
            raise ValueError("--spm: give either --spm or --encoder-json/--vocab-bpe, not both")
        return SubwordSpec.spm(args.spm, args.dict)
    if not all(gpt2) or args.dict is None:
        raise ValueError("tokenizer: give --encoder-json, --vocab-bpe and --dict (GPT-2 BPE), or --spm MODEL")
    return SubwordSpec.gpt2(args.encoder_json, args.vocab_bpe, args.dict)
