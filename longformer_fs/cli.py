"""``longformer-fs``: the project's command line.

Subcommands register themselves in :data:`COMMANDS`; each is a module with
``add_arguments(parser)`` and ``main(args) -> int``. A subcommand's module is imported
only when that subcommand is parsed: ``longformer-fs --help`` imports none of them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings

# name -> (module, one-line help). Nested names ("bench attention") become sub-subcommands.
COMMANDS = {
    "info": ("longformer_fs.commands.info", "print versions, the attention backends here and auto's choice"),
    "check": (
        "longformer_fs.commands.check",
        "verify the compiled kernels on this device (GPU) against float64; auto trusts CUDA kernels only after it",
    ),
    "report": (
        "longformer_fs.report",
        "what longformer-fs does on this machine (GPU): verify, attention speed, end to end, recipes, longest "
        "document; report.md and report.json",
    ),
    "demo": ("longformer_fs.commands.demo", "the 5-phase character-LM recipe at toy scale on a generated corpus"),
    "prep text8": ("longformer_fs.commands.prep_char", "text8 as a byte-level fairseq dataset (90M/5M/5M)"),
    "prep enwik8": ("longformer_fs.commands.prep_char", "enwik8 as a byte-level fairseq dataset (90M/5M/5M)"),
    "prep docs": (
        "longformer_fs.commands.prep_docs",
        "long documents (txt, JSONL, Wikipedia XML, PDF papers) as a BPE masked-LM dataset",
    ),
    "prep classification": (
        "longformer_fs.commands.prep_classification",
        "labelled documents (JSONL, TSV, IMDB's label folders) for fairseq's sentence_prediction task",
    ),
    "prep qa": ("longformer_fs.commands.prep_qa", "TriviaQA (as released) / SQuAD JSON as QA windows, gold positions"),
    "prep wikihop": ("longformer_fs.commands.prep_wikihop", "WikiHop as question+candidates prefix and context"),
    "prep hotpotqa": (
        "longformer_fs.commands.prep_hotpotqa",
        "HotpotQA JSON (distractor, full wiki; the test file without labels) as [q] question [/q] [p] [s] sentence ...",
    ),
    "prep coref": (
        "longformer_fs.commands.prep_coref",
        "CoNLL-2012 *_gold_conll files (one language of the release) as documents with speakers and gold clusters",
    ),
    "prep summarization": (
        "longformer_fs.commands.prep_summarization",
        "document/summary pairs (prep docs papers, arXiv/PubMed, JSONL) as fairseq translation data for LED",
    ),
    "eval-bpc": ("longformer_fs.commands.eval_bpc", "test BPC of a character-LM checkpoint, paper protocol"),
    "eval-qa": (
        "longformer_fs.commands.eval_qa",
        "exact match and F1 of a longformer_qa checkpoint on a prep qa split (answers cut from the text)",
    ),
    "eval-hotpotqa": (
        "longformer_fs.commands.eval_hotpotqa",
        "HotpotQA predictions (answer and supporting facts) of a longformer_hotpotqa checkpoint, with official EM/F1",
    ),
    "eval-coref": (
        "longformer_fs.commands.eval_coref",
        "MUC, B3, CEAF-phi4 and CoNLL F1 of a longformer_coref checkpoint on a prep coref split",
    ),
    "sample": (
        "longformer_fs.commands.sample",
        "text written by a character-LM checkpoint after a prompt (sampled, greedy or beam search)",
    ),
    "summarize": (
        "longformer_fs.commands.summarize",
        "summaries of text/JSONL/PDF documents (or a prepared split, with ROUGE) from an LED checkpoint",
    ),
    "rouge": ("longformer_fs.commands.rouge", "ROUGE-1/2/Lsum F1 of summaries against references, as papers report"),
    "import-hf": (
        "longformer_fs.commands.import_hf",
        "a released Longformer or LED in HF transformers' layout (allenai's) as our checkpoint, tokenizer included",
    ),
    "convert-roberta": (
        "longformer_fs.commands.convert_roberta",
        "a RoBERTa checkpoint (fairseq or HF layout) as a longformer_roberta one (positions to 4096)",
    ),
    "convert-bart": (
        "longformer_fs.commands.convert_bart",
        "a BART checkpoint (fairseq or HF layout) as an LED one (encoder positions to 16384, global projections)",
    ),
    "export-hf": (
        "longformer_fs.commands.export_hf",
        "a longformer_roberta (masked LM or fine-tuned) or led checkpoint as an HF transformers model directory",
    ),
    "export-onnx": (
        "longformer_fs.commands.export_onnx",
        "a longformer_roberta checkpoint (masked LM, classifier, QA) as one ONNX file for every batch, length and "
        "global pattern; an led as optimum's encoder and decoder files",
    ),
    "summarize-onnx": (
        "longformer_fs.commands.summarize_onnx",
        "summaries of text/JSONL/PDF documents from an LED that export-onnx wrote, in onnxruntime, without torch",
    ),
    "bench attention": (
        "longformer_fs.benchmarks.attention",
        "time and peak memory of every attention implementation against sequence length",
    ),
    "bench lm": ("longformer_fs.benchmarks.lm", "training throughput of longformer_lm_small vs transformer_lm"),
    "bench sample": (
        "longformer_fs.benchmarks.sample",
        "characters/s and memory of writing text at 1K-32K contexts: incremental, recompute, transformer_lm",
    ),
    "bench led": (
        "longformer_fs.benchmarks.led",
        "training step of LED vs BART with full attention at source lengths 1K-16K (time, peak memory)",
    ),
    "bench finetune": (
        "longformer_fs.benchmarks.finetune",
        "QA training step of longformer_roberta_base at 4096 tokens vs HF LongformerForQuestionAnswering",
    ),
    "bench scale": (
        "longformer_fs.benchmarks.scale",
        "training steps/s of longformer_lm_small with 1 and 2 fairseq-train processes (DDP)",
    ),
    "bench import-hf": (
        "longformer_fs.benchmarks.import_hf",
        "seconds and peak memory of import-hf on a longformer-base-4096-shaped directory",
    ),
    "bench onnx": (
        "longformer_fs.benchmarks.onnx",
        "ms and peak memory of export-onnx's file in onnxruntime vs our eager model and HF's, at 512-16K tokens",
    ),
    "bench pack": (
        "longformer_fs.benchmarks.pack",
        "continued MLM on long-tailed documents: packed rows vs complete_doc and complete (real tokens/s, loss)",
    ),
    "bench prep-docs": (
        "longformer_fs.benchmarks.prep_docs",
        "end-to-end MB/s of prep docs on a generated corpus, per worker count",
    ),
}


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser, whose arguments its module adds when this subcommand is
    parsed (to run it, or for its ``--help``): the modules import torch, fairseq and more."""

    def __init__(self, *args, module: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._module = module

    def parse_known_args(self, args=None, namespace=None):
        if self._module is not None:
            module = importlib.import_module(self._module)
            self._module = None
            module.add_arguments(self)
            self.set_defaults(_main=module.main)
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="longformer-fs",
        description="Longformer for fairseq: attention kernels, character-LM and MLM recipes. "
        "Training itself runs through fairseq-train / fairseq-hydra-train with "
        "--user-dir longformer_fs; this tool covers set-up checks, data and benchmarks.",
    )
    # Group parsers (bench, prep) are _SubcommandParsers too, and so their subparsers.
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_SubcommandParser)
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        *group, leaf = name.split()
        target = subparsers
        if group:
            if group[0] not in groups:
                group_parser = subparsers.add_parser(group[0], help=f"{group[0]} subcommands")
                groups[group[0]] = group_parser.add_subparsers(dest="subcommand", metavar="WHAT", required=True)
            target = groups[group[0]]
        target.add_parser(
            leaf,
            help=help_text,
            description=help_text,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
            module=module_name,
        )
    return parser


def _quiet_libraries() -> None:
    """Keep the commands' output theirs: fairseq configures the root logger at INFO when
    imported (its text_to_speech task), which would print every library's info lines, and
    fairscale, which it imports, warns about torch APIs it uses. Logging set up here first
    makes fairseq's set-up a no-op; warnings still print, as bare messages."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning, module="fairscale")


def _read_check_records() -> None:
    """Let ``auto`` read what ``longformer-fs check`` recorded, in a command whose module
    loaded the attention core (info, check, bench, report): the core alone is not told of
    the records, and these run it without fairseq, whose loading installs them
    (:mod:`.components`). A command without attention (prep, rouge) pays nothing."""
    if "longformer_fs.attention" in sys.modules:
        from .verification import use_records

        use_records()


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    args = build_parser().parse_args(argv)
    _read_check_records()  # after parsing: `--help` has exited, importing nothing
    try:
        code = args._main(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except (ValueError, FileNotFoundError, FileExistsError) as err:  # user errors (PrepError too): one line
        print(f"longformer-fs: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what a run staged is already removed (data_prep's Staging); no traceback
        print("longformer-fs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `longformer-fs ... | head`: the reader has gone, and the output with it. Quiet, as
        # Python's docs advise: what is left to flush goes nowhere, not into a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
