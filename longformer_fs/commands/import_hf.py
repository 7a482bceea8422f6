"""``longformer-fs import-hf``: a released Longformer or LED (HF transformers' layout) as our checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..conversion.import_hf import import_hf
from .options import add_conversion_arguments, print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read a model directory as the HF hub serves it (config.json; model.safetensors or pytorch_model.bin, "
        "sharded or not; tokenizer.json and/or vocab.json + merges.txt, or XLM-R's sentencepiece.bpe.model or "
        "Unigram tokenizer.json) and write OUT/model.pt and OUT/dict.txt, the layout convert-roberta and "
        "convert-bart write, with OUT/encoder.json and OUT/vocab.bpe (or OUT/sentencepiece.bpe.model) for the prep "
        "commands (their ids are the HF tokenizer's). A Longformer (bare, masked LM, question answering or "
        "sequence classification) becomes longformer_roberta with its head (the masked-LM head, longformer_qa's "
        "span head or sentence_prediction's classifier); another head is left out, and said so. An LED (bare or "
        "conditional generation) becomes led. Windows (HF's attention_window is both sides; ours is one), "
        "positions, global projections, layer-norm epsilon, activation and sizes carry over; a setting our models "
        "cannot express is an error that names it. On any error OUT is left as it was."
    )
    add_conversion_arguments(
        parser,
        "hf_dir",
        "the HF model directory (e.g. a download of allenai/longformer-base-4096 or allenai/led-base-16384)",
        "output directory (model.pt, dict.txt, encoder.json, vocab.bpe, import-hf.json)",
    )
    parser.add_argument(
        "--max-positions",
        type=int,
        default=None,
        help="extend the (encoder) position table to N by copying, as convert-roberta does: e.g. 16384 for a "
        "Longformer released with 4096, 32768 for an LED released with 16384 (default: as released)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="the directory of the tokenizer files, when they are not in HF_DIR",
    )


def main(args: argparse.Namespace) -> int:
    report = import_hf(args.hf_dir, args.out, args.max_positions, args.tokenizer, args.force)
    return print_report(report, args.json, _summary)


# What to run next, by the head the import ends in (an LED's is the summarizer).
_NEXT = {
    "summarizer": "fairseq-hydra-train --config-dir recipes/summarization --config-name led_base_16k task.data=DATA "
    "checkpoint.finetune_from_model={model}   (or: make summarize-arxiv BART={out} ...)",
    "qa": "longformer-fs eval-qa {model} --data DATA   (or fine-tune further: make finetune-triviaqa MODEL={model} "
    "DATA=DATA)",
    "classification": "make finetune-imdb MODEL={model} DATA=DATA",
}


def _summary(report: dict):
    layers = "+".join(map(str, report["layers"]))
    yield (
        f"imported {report['source']} ({report['model_type']}, {layers} layers) -> {report['output']} as "
        f"{report['arch']} (head: {report['head']}, task: {report['task']})"
    )
    old, new = report["positions"]
    yield f"  positions: {old}" + (f" -> {new} (copies of the {old} learned rows)" if new != old else "")
    if report["window"] is not None:
        extra = f", dilation {report['dilation']}" if report.get("dilation") not in (None, "1") else ""
        yield f"  window: {report['window']} per side{extra}" + (", causal" if report.get("causal") else "")
    yield f"  vocabulary: {report['vocab']} ids; tokenizer from {', '.join(report['tokenizer'])}"
    for note in report["notes"]:
        yield f"  {note}"
    if report["left_out"]:
        yield f"  left out: {'; '.join(report['left_out'])}"
    out = str(Path(report["output"]).parent)
    yield (
        f"  prep: --encoder-json {out}/encoder.json --vocab-bpe {out}/vocab.bpe --dict {out}/dict.txt "
        "give this model's ids"
    )
    hint = _NEXT.get(report["head"], "make finetune-triviaqa MODEL={model} DATA=DATA   (or any make finetune-* target)")
    yield "  next: " + hint.format(model=report["output"], out=out)
