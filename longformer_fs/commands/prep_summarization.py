"""``longformer-fs prep summarization``: document/summary pairs as fairseq translation data."""

from __future__ import annotations

import argparse
import os

from data_prep.summarization import LAYOUTS, SummarizationConfig, prepare_summarization, stats_table

from .options import add_output_arguments, add_split_arguments, config_from_args, dropped_report, run_preparation
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Tokenize document/summary pairs and write them in the layout fairseq-preprocess gives with "
        "--source-lang source --target-lang target, for --task translation (LED fine-tuning): dict.source.txt and "
        "dict.target.txt (the model's dictionary), {split}.source-target.{source,target}.{bin,idx} with sources as "
        "'<s> tokens </s>' and summaries as 'tokens </s>', and {split}.references.jsonl ({id, reference} with one "
        "reference sentence per line, for longformer-fs rouge). Sources over --max-source-tokens lose their end "
        "(counted in the table and stats.json). Malformed lines and pairs with an empty side are reported and "
        "skipped. Rerunning with the same inputs does nothing."
    )
    inputs = parser.add_argument_group(
        "inputs",
        "JSONL files, one pair per line. --format papers: the papers.jsonl of prep docs (body -> abstract). "
        "--format arxiv: the arXiv/PubMed release of Cohan et al. 2018 (article_text -> abstract_text, <S> tags "
        "stripped). --format jsonl: any JSONL, with --source-field and --target-field (a string, or a list of "
        "sentences). Give the splits as files, or one --input that a hash of each document splits.",
    )
    inputs.add_argument("--format", dest="input_format", choices=list(LAYOUTS), required=True, help="input layout")
    add_split_arguments(inputs, "pairs", "one file of pairs to split by the fractions", "pairs", fraction=0.01)
    inputs.add_argument(
        "--source-field", help="the document's field; unset: body (papers), article_text (arxiv); jsonl needs it"
    )
    inputs.add_argument(
        "--target-field", help="the summary's field; unset: abstract (papers), abstract_text (arxiv); jsonl needs it"
    )
    inputs.add_argument(
        "--id-field",
        help="the id that references.jsonl gives each pair; unset: file (papers), article_id (arxiv), id (jsonl); "
        "FILE:LINE where a line has none",
    )
    add_subword_arguments(parser, model="BART's, which LED keeps")
    parser.add_argument(
        "--max-source-tokens",
        type=int,
        default=16384,
        help="longest source, <s> and </s> included (LED's positions)",
    )
    parser.add_argument(
        "--max-target-tokens", type=int, default=1024, help="longest summary, </s> included (the decoder's positions)"
    )
    parser.add_argument(
        "--no-truncate",
        action="store_true",
        help="stop with an error naming the first pair over a limit, instead of cutting it",
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="processes for tokenizing (default: all cores)"
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(SummarizationConfig, args, truncate=not args.no_truncate)
    return run_preparation(prepare_summarization, cfg, args, stats_table, _report)


def _report(result: dict):
    limits = result["limits"]
    yield (
        f"limits: sources {limits['max_source_tokens']:,} tokens (<s> and </s> included), "
        f"summaries {limits['max_target_tokens']:,} (</s> included)"
    )
    yield from dropped_report("pairs with an empty side:", result["empty_side"])
    yield from dropped_report("lines skipped:", result["skipped"])
