"""``longformer-fs convert-roberta``: a RoBERTa checkpoint as a longformer_roberta one."""

from __future__ import annotations

import argparse

from ..conversion.roberta import convert_roberta
from .options import add_conversion_arguments, print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read a fairseq RoBERTa checkpoint (model.pt with dict.txt beside it) and write a longformer_roberta "
        "checkpoint that fairseq-train can start from (checkpoint.finetune_from_model=OUT/model.pt): the "
        "learned position table is tiled out to --max-positions keeping fairseq's reserved rows, each "
        "layer's q/k/v are copied into the global projections, and the model config gets --window. "
        "Nothing else changes, so with a window as wide as the input the result equals RoBERTa."
    )
    add_conversion_arguments(
        parser,
        "roberta",
        "RoBERTa model.pt, or the directory holding model.pt and dict.txt",
        "output directory (model.pt and dict.txt)",
    )
    parser.add_argument(
        "--max-positions",
        type=int,
        default=4096,
        help="positions of the converted model (paper: 4096); at least the source's",
    )
    parser.add_argument(
        "--window",
        default="256",
        help="one-sided attention window: 'w' for every layer or 'w0,w1,...' (paper: 256, i.e. a 512-token window)",
    )
    parser.add_argument(
        "--position-init",
        choices=("copy", "random"),
        default="copy",
        help="new position rows: copies of RoBERTa's (paper) or random (the paper's ablation)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --position-init random")
    parser.add_argument(
        "--add-tokens",
        default="",
        metavar="SYMBOLS",
        help="comma-separated new dictionary symbols with random embedding rows, appended to dict.txt "
        "(WikiHop: '[q],[/q],[ent],[/ent]'); existing rows are unchanged",
    )


def main(args: argparse.Namespace) -> int:
    extra = [t.strip() for t in args.add_tokens.split(",") if t.strip()]
    report = convert_roberta(args.roberta, args.out, args.max_positions, args.window, args.position_init, args.seed,
                             extra_tokens=extra, force=args.force)  # fmt: skip
    return print_report(report, args.json, _summary)


def _summary(report: dict):
    old, new = report["positions"]
    yield (
        f"converted {report['source']} ({report['source_model']}, {report['layers']} layers) "
        f"-> {report['output']} as {report['arch']}"
    )
    yield f"  positions: {old} -> {new} ({report['position_init']}; fairseq's 2 reserved rows kept)"
    yield f"  global projections: {report['global_projection_tensors']} tensors copied from q/k/v"
    yield f"  window: {report['window']} per side"
    if report["added_tokens"]:
        added = ", ".join(f"{symbol} (id {index})" for symbol, index in report["added_tokens"].items())
        yield f"  added tokens: {added}"
    yield (
        f"  next: fairseq-hydra-train --config-dir recipes/mlm --config-name longformer_base_4096 "
        f"task.data=DATA checkpoint.finetune_from_model={report['output']}"
    )
