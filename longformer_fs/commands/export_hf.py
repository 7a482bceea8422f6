"""``longformer-fs export-hf``: a ``longformer_roberta`` or ``led`` checkpoint for HF transformers."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..export.hf import export_hf
from .options import add_conversion_arguments, print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write a directory that HF transformers loads offline. A longformer_roberta checkpoint becomes "
        "LongformerForMaskedLM, or, fine-tuned, LongformerForSequenceClassification (sentence_prediction), "
        "LongformerForQuestionAnswering (longformer_qa) or LongformerForTokenClassification (longformer_wikihop's "
        "per-candidate head); an led checkpoint becomes LEDForConditionalGeneration (positions without "
        "fairseq's reserved rows). It writes "
        "config.json (attention_window = 2w per layer), the weights and, with --tokenizer, a tokenizer "
        "whose ids are the model's. Dilated or causal models have no HF counterpart and are refused, and so "
        "are longformer_hotpotqa checkpoints (HF transformers has no HotpotQA head)."
    )
    add_conversion_arguments(parser, "checkpoint", "a longformer_roberta or led checkpoint (.pt)", "output directory")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="an HF tokenizer directory, or a directory with GPT-2's encoder.json and vocab.bpe "
        "(mapped to model ids through --dict)",
    )
    parser.add_argument(
        "--dict",
        type=Path,
        default=None,
        help="the model's fairseq dict.txt, for --tokenizer (default: the one next to the checkpoint, else the one "
        "in the data directory the checkpoint was trained on)",
    )


def main(args: argparse.Namespace) -> int:
    report = export_hf(args.checkpoint, args.out, args.tokenizer, args.dict, args.force)
    return print_report(report, args.json, _summary)


def _summary(report: dict):
    yield (
        f"exported {report['checkpoint']} -> {report['output']} ({report['layers']} layers, "
        f"HF attention_window {report['attention_window_hf'][0]}"
        f"{'' if len(set(report['attention_window_hf'])) == 1 else ' ...'}, vocab {report['vocab']}, "
        f"tokenizer: {report['tokenizer'] or 'none'})"
    )
    if report["dictionary"]:
        yield f"  dictionary: {report['dictionary']}"
    for note in report.get("notes", []):
        yield f"  {note}"
    yield f"  load: transformers.{report['model_class']}.from_pretrained({str(report['output'])!r})"
