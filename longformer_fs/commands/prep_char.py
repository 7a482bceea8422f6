"""``longformer-fs prep text8|enwik8``: the character-LM corpora as fairseq datasets."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from data_prep.char_corpus import prepare

from .options import add_output_arguments, comma_triple

_sizes = comma_triple(int, lambda sizes: min(sizes) >= 1, "byte counts")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Split the official zip in file order (90M/5M/5M bytes) and write a byte-level fairseq "
        "dataset: {train,valid,test}.{bin,idx}, dict.txt and prep.json. Every byte is a token, "
        "newlines included; no end-of-sentence tokens are added, so BPC counts exactly the bytes "
        "of a split. Running it again with the same inputs does nothing."
    )
    parser.add_argument(
        "--zip",
        type=Path,
        default=None,
        help="the official zip (default: OUT/<corpus>.zip, downloaded there with --download)",
    )
    parser.add_argument("--download", action="store_true", help="download the zip when it is missing")
    parser.add_argument("--url", default=None, help="download from this URL instead of the official one")
    parser.add_argument(
        "--skip-checksum", action="store_true", help="accept a zip whose checksum differs from the official file's"
    )
    parser.add_argument(
        "--split-sizes",
        type=_sizes,
        default=None,
        help="TRAIN,VALID,TEST byte counts (default: 90000000,5000000,5000000)",
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    manifest = prepare(
        args.subcommand,
        args.out,
        args.zip,
        args.download,
        not args.skip_checksum,
        args.split_sizes,
        args.force,
        args.url,
    )
    tokens = manifest.get("tokens", {})
    print(
        f"{args.out}: {manifest['corpus']} train/valid/test = "
        + "/".join(f"{tokens.get(s, 0):,}" for s in ("train", "valid", "test"))
        + f" bytes, {manifest.get('vocab_bytes')} symbols, unknown in valid/test = "
        + f"{manifest.get('unknown_tokens', {}).get('valid', 0)}/{manifest.get('unknown_tokens', {}).get('test', 0)}"
        + f" ({time.perf_counter() - start:.1f} s)"
    )
    return 0
