"""``longformer-fs summarize``: summaries of documents (text, JSONL, PDF) from an LED checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from data_prep.summarize_inputs import read_documents

from .. import output
from ..checkpoint import Checkpoint
from ..evaluation.rouge import rouge_scores
from ..evaluation.summarization import (
    GenerationSettings,
    generate,
    source_tokens,
    to_text,
)
from .options import add_device_argument, add_generation_arguments, generation_settings
from .subword_options import add_subword_arguments, subword_spec

DEFAULTS = GenerationSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Summarize documents with an LED (or BART) checkpoint through fairseq's beam search. Inputs are .txt "
        "files (one document each), .jsonl files (--text-field) and .pdf papers (their body), or a split of a "
        "`prep summarization` directory (--data, --split), which is also scored with ROUGE against its "
        "references. Writes JSONL {id, summary} with one sentence per line in each summary. The tokenizer "
        "options default to the files beside the checkpoint (an import-hf or convert-bart output), else those "
        "its training data was prepared with."
    )
    parser.add_argument("checkpoint", type=Path, help="an led checkpoint (checkpoint_best.pt, ...)")
    parser.add_argument("inputs", type=Path, nargs="*", help=".txt, .jsonl or .pdf files")
    parser.add_argument("--data", type=Path, help="a `prep summarization` directory: summarize its --split")
    parser.add_argument("--split", default="test", help="the split of --data (default: test)")
    parser.add_argument("--text-field", default="text", help="the JSONL field holding a document")
    parser.add_argument("--out", type=Path, default=None, help="write the summaries here (JSONL; default: print)")
    add_subword_arguments(parser, model="BART's")
    add_generation_arguments(parser, DEFAULTS)
    parser.add_argument("--batch-size", type=int, default=4, help="documents per beam search")
    add_device_argument(parser)


def main(args: argparse.Namespace) -> int:
    if bool(args.inputs) == bool(args.data):
        raise ValueError("inputs: give document files, or --data DIR (a prep summarization directory), not both")
    settings = generation_settings(args, DEFAULTS)
    checkpoint = Checkpoint.read(args.checkpoint)
    if args.dict is None:
        args.dict = checkpoint.dictionary(args.data)
        print(f"dictionary: {args.dict}", file=sys.stderr)  # stdout may be the summaries
    if args.encoder_json or args.vocab_bpe or args.spm:
        encoder = subword_spec(args).load()
    else:  # the files beside the checkpoint, or those its data was prepared with
        encoder = checkpoint.tokenizer(args.dict)
    model, task = checkpoint.load(args.device, args.data, dictionary=args.dict)
    max_positions = model.max_positions()[0]
    references = None
    if args.data is not None:
        task.load_dataset(args.split)
        dataset = task.dataset(args.split).src
        sources = [source_tokens(dataset[i][1:-1], max_positions) for i in range(len(dataset))]  # without <s> </s>
        lines = (args.data / f"{args.split}.references.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        ids, references = [r["id"] for r in records], [r["reference"] for r in records]
        if len(ids) != len(sources):
            raise ValueError(f"--data: {len(ids)} references for {len(sources)} sources in {args.split}")
    else:
        documents = list(read_documents(args.inputs, args.text_field))
        ids = [d.id for d in documents]
        sources = [source_tokens(ids_, max_positions) for ids_ in encoder.encode([d.text for d in documents])]
    hypotheses = generate(
        model, task, sources, settings, args.batch_size, lambda batches: tqdm(batches, desc="summarize", unit="batch")
    )
    summaries = [to_text(h, encoder) for h in hypotheses]
    rows = [json.dumps({"id": i, "summary": s}, ensure_ascii=False) for i, s in zip(ids, summaries, strict=True)]
    if args.out:
        output.write_text(args.out, "".join(r + "\n" for r in rows))
        print(f"wrote {len(rows)} summaries to {args.out}")
    else:
        print("\n".join(rows))
    if references is not None:
        scores = rouge_scores(summaries, references)
        print(
            f"ROUGE ({args.split}, {scores['documents']} documents, F1 x 100): "
            + ", ".join(f"{name} {scores[name]['f1']:.2f}" for name in ("rouge1", "rouge2", "rougeLsum"))
        )
        if args.out:
            output.write_json(args.out.with_suffix(".rouge.json"), scores)
    return 0
