"""``longformer-fs rouge``: ROUGE-1/2/Lsum of summaries against references."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..evaluation.rouge import check_aligned, format_scores, read_summaries, rouge_scores


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Score hypotheses against references with Google's rouge-score: ROUGE-1, ROUGE-2 and ROUGE-Lsum F1 (x100, "
        "Porter stemmer, mean over documents), as summarization papers report them. ROUGE-Lsum needs one sentence "
        "per line: a .jsonl file's field holds a summary with sentences separated by newlines (prep "
        "summarization's {split}.references.jsonl works as it is) or a list of sentences; any other file is plain "
        "text, one summary per line, split into sentences at '.', '!' and '?' followed by a space (abbreviations "
        "such as 'e.g.' and 'Fig.', initials, and a period before a lowercase word do not end a sentence). Both "
        "files must list the same documents in the same order (JSONL 'id' fields are compared when both have them)."
    )
    parser.add_argument("--hyp", type=Path, required=True, help="the hypotheses (system summaries): .jsonl or text")
    parser.add_argument("--ref", type=Path, required=True, help="the references: .jsonl or text")
    parser.add_argument(
        "--hyp-field",
        default="summary",
        help="the field holding the summary in a --hyp .jsonl (summarize --out writes 'summary')",
    )
    parser.add_argument("--ref-field", default="reference", help="the field holding the summary in a --ref .jsonl")
    parser.add_argument("--verbose", action="store_true", help="print precision and recall too")
    parser.add_argument("--json", action="store_true", help="print the scores (precision, recall, F1) as JSON")


def main(args: argparse.Namespace) -> int:
    hypotheses = read_summaries(args.hyp, args.hyp_field, "hyp-field")
    references = read_summaries(args.ref, args.ref_field, "ref-field")
    check_aligned(hypotheses, references)
    scores = rouge_scores([h.text for h in hypotheses], [r.text for r in references])
    if args.json:
        print(json.dumps(scores, indent=2))
        return 0
    print(f"documents: {scores['documents']:,} (F1 x100, Porter stemmer, mean over documents)")
    print(format_scores(scores, verbose=args.verbose))
    return 0
