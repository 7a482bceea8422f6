"""``longformer-fs summarize-onnx``: summaries from an LED that export-onnx wrote, in onnxruntime.

Imports neither torch nor fairseq (the command line imports a subcommand's module only when
it runs), so it serves on a host that has onnxruntime, numpy and ``tokenizers`` alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.summarize_inputs import read_documents

from ..serving.summarizer import OnnxSummarizer
from .options import add_generation_arguments, generation_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Summarize .txt, .jsonl and .pdf documents with an LED that export-onnx wrote (a directory), in "
        "onnxruntime, without torch. Prints JSONL {id, summary}, one sentence a line in each summary, as "
        "summarize does, with the same beam search (fairseq's rules). The settings default to those the "
        "export recorded in generation_config.json (summarize's: beam 4, length penalty 2.0, no repeated "
        "3-gram, 20 to 512 tokens)."
    )
    parser.add_argument("model", type=Path, help="the directory export-onnx wrote for an led checkpoint")
    parser.add_argument("inputs", type=Path, nargs="+", help=".txt, .jsonl or .pdf files")
    parser.add_argument("--text-field", default="text", help="the JSONL field holding a document")
    add_generation_arguments(parser, None, "generation (default: the export's generation_config.json)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime's threads (default: its choice)")


def main(args: argparse.Namespace) -> int:
    summarizer = OnnxSummarizer(args.model, args.threads)
    settings = generation_settings(args, summarizer.settings)
    for document in read_documents(args.inputs, args.text_field):
        summary = summarizer.summarize(document.text, settings)
        print(json.dumps({"id": document.id, "summary": summary}, ensure_ascii=False), flush=True)
    return 0
