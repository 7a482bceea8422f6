"""``longformer-fs convert-bart``: a BART checkpoint as an LED one."""

from __future__ import annotations

import argparse

from ..conversion.bart import convert_bart
from .options import add_conversion_arguments, print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read a fairseq BART checkpoint (model.pt with dict.txt beside it) and write an LED checkpoint that "
        "fairseq-train can start from (checkpoint.finetune_from_model=OUT/model.pt): the encoder's learned "
        "positions are copied out to --max-source-positions keeping fairseq's reserved rows (16 copies of "
        "BART's 1,024 for 16K, as the paper did), each encoder layer's q/k/v are copied into the global "
        "projections, and the model config gets --window. Nothing else changes (the decoder is BART's), so "
        "with a window as wide as the source the result equals BART."
    )
    add_conversion_arguments(
        parser,
        "bart",
        "BART model.pt, or the directory holding model.pt and dict.txt",
        "output directory (model.pt and dict.txt)",
    )
    parser.add_argument(
        "--max-source-positions",
        type=int,
        default=16384,
        help="source positions of the converted model (paper: 16384); at least the source's",
    )
    parser.add_argument(
        "--window",
        default="512",
        help="one-sided encoder window: 'w' for every layer or 'w0,w1,...' (paper: 512, i.e. a 1,024-token window)",
    )


def main(args: argparse.Namespace) -> int:
    report = convert_bart(args.bart, args.out, args.max_source_positions, args.window, args.force)
    return print_report(report, args.json, _summary)


def _summary(report: dict):
    old, new = report["source_positions"]
    encoder, decoder = report["layers"]
    yield (
        f"converted {report['source']} ({report['source_model']}, {encoder}+{decoder} layers) -> "
        f"{report['output']} as {report['arch']}"
    )
    yield f"  encoder positions: {old} -> {new} (copies of the {old} learned rows; fairseq's reserved rows kept)"
    yield f"  decoder positions: {report['target_positions']} (unchanged)"
    yield f"  global projections: {report['global_projection_tensors']} tensors copied from the encoder's q/k/v"
    yield f"  encoder window: {report['window']} per side; global attention on each source's first <s>"
    yield (
        f"  next: fairseq-hydra-train --config-dir recipes/summarization --config-name led_base_16k "
        f"task.data=DATA checkpoint.finetune_from_model={report['output']}"
    )
