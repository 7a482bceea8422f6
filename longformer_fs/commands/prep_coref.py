"""``longformer-fs prep coref``: CoNLL-2012 coreference (OntoNotes) as token, sentence,
speaker and mention items, one per document part."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

from data_prep.coref import ALL_LANGUAGES, LANGUAGES, UNESCAPED, CorefConfig, prepare_coref, stats_table

from .options import SPLIT_NAMES, add_output_arguments, config_from_args, dropped_report, run_preparation
from .subword_options import add_subword_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read CoNLL-2012 *_gold_conll files (a file, or a folder searched recursively, per split, e.g. "
        "conll-2012/v4/data/train of the release), tokenize each word with the model's BPE keeping the word of "
        "every token, and write per document part its tokens, sentence and speaker ids, gold mentions as token "
        "spans with their clusters, and {split}.examples.jsonl (words, clusters as word spans, token->word map) "
        "for eval-coref. Words the release escapes, '/.' and '/?', read as '.' and '?', as the reference "
        "preprocessing (e2e-coref's minimize.py) reads them. Malformed coreference brackets are an error naming "
        "the file and line, and so is a *_gold_skel skeleton whose words (all [WORD]) were never restored with "
        "the release's skeleton2conll.sh. Prints how many documents need more than one segment of --max-tokens, "
        "the words unescaped and the files --language left out. Rerunning with the same inputs does nothing."
    )
    for split in SPLIT_NAMES:
        parser.add_argument(f"--{split}", type=Path, help=f"the {split} *_gold_conll file or a folder of them")
    parser.add_argument(
        "--language",
        choices=(*LANGUAGES, ALL_LANGUAGES),
        default="english",
        help="keep the files under data/LANGUAGE/ of the release, whose splits hold all three (english is the "
        "paper's); files whose path names no language of the release are always kept; all: keep every file",
    )
    add_subword_arguments(parser)
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="the model's length, for the stats (documents over one segment)"
    )
    add_output_arguments(parser)


def main(args: argparse.Namespace) -> int:
    return run_preparation(prepare_coref, config_from_args(CorefConfig, args), args, stats_table, _report)


def _report(result: dict) -> Iterator[str]:
    """Per split, the words unescaped and the release's files --language left out, where any were."""
    for split, st in result["splits"].items():
        if any(st["unescaped"].values()):
            counts = ", ".join(f"{n:,} {word!r} -> {UNESCAPED[word]!r}" for word, n in st["unescaped"].items() if n)
            yield f"{split}: words unescaped: {counts}"
        if st["left_out"]["count"]:
            yield from dropped_report(f"{split}: files left out by --language {result['language']}:", st["left_out"])
