"""Options and steps that several commands share, defined once.

- :func:`add_output_arguments`: ``--out`` and ``--force`` of the ``prep`` commands that
  build a dataset directory;
- :func:`add_evaluation_arguments`: the checkpoint, ``--data`` and ``--split`` of the
  ``eval-*`` commands; :func:`add_conversion_arguments`: the checkpoint, ``--out``, ``--force``
  and ``--json`` of the commands that write a converted model, and :func:`print_report`;
- :func:`add_split_arguments`: the ``--train/--valid/--test`` files, or one ``--input``
  to split by ``--valid-fraction``/``--test-fraction``; :func:`split_files`: the split
  files given;
- :func:`config_from_args`: a preparation's config from the flags named like its fields;
- :func:`run_preparation`: run a preparation, timed, and print its report, with
  :func:`symbol_report` and :func:`dropped_report` where it has symbols or dropped inputs;
- :func:`comma_triple`: an argument type for ``TRAIN,VALID,TEST`` numbers;
- :func:`add_device_argument`: ``--device``, CUDA when there is one;
- :func:`add_generation_arguments` and :func:`generation_settings`: the beam search flags
  of ``summarize`` and ``summarize-onnx``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..serving.beam_search import GenerationSettings

SPLIT_NAMES = ("train", "valid", "test")
GENERATION_HELP = {"beam": "beam size", "lenpen": "length penalty",
                   "no_repeat_ngram_size": "never repeat an n-gram of this size (0: off)",
                   "min_len": "minimum summary tokens", "max_len": "maximum summary tokens"}  # fmt: skip


def add_generation_arguments(parser: argparse.ArgumentParser, defaults: GenerationSettings | None,
                             title: str = "generation") -> None:  # fmt: skip
    """One flag per :class:`GenerationSettings` field (``--beam``, ``--lenpen``,
    ``--no-repeat-ngram-size``, ``--min-len``, ``--max-len``), defaulting to ``defaults``'
    values, or to None where the model brings its own (:func:`generation_settings`)."""
    group = parser.add_argument_group(title)
    for field in dataclasses.fields(GenerationSettings):
        default = None if defaults is None else getattr(defaults, field.name)
        group.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=default,
                           help=GENERATION_HELP[field.name])  # fmt: skip


def generation_settings(args: argparse.Namespace, base: GenerationSettings) -> GenerationSettings:
    """``base`` with the generation flags given (a flag left None keeps ``base``'s value), checked."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(GenerationSettings)}
    settings = dataclasses.replace(base, **{name: value for name, value in given.items() if value is not None})
    settings.check()
    return settings


def config_from_args(config_type: type, args: argparse.Namespace, **given):
    """A preparation's ``config_type`` dataclass from the command line.

    A field named in ``given`` takes that value; ``subword`` and ``files`` are built from
    the subword flags and :func:`split_files`; any other field takes the flag of its name
    (``--max-tokens`` sets ``max_tokens``). So a command names only the fields whose flag
    differs from them, and a field that matches no flag is an error here, not a flag
    silently ignored.
    """
    from .subword_options import subword_spec

    built = {"subword": subword_spec, "files": split_files}
    values = dict(given)
    for f in dataclasses.fields(config_type):
        if f.name in values:
            continue
        if f.name in built:
            values[f.name] = built[f.name](args)
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
        else:
            raise TypeError(f"{config_type.__name__}.{f.name}: no --{f.name.replace('_', '-')} flag, and not given")
    return config_type(**values)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` (required) and ``--force``, for a preparation that rebuilds only what changed."""
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild even when up to date, and write into OUT when it holds something else (files this "
        "command did not write are left alone; without it, OUT must be absent, empty, or this kind of "
        "dataset from the same input files)",
    )


def add_evaluation_arguments(
    parser: argparse.ArgumentParser, checkpoint_help: str, data_help: str, split: str = "valid"
) -> None:
    """``CHECKPOINT --data DIR [--split NAME]``: a checkpoint scored on a prepared split."""
    parser.add_argument("checkpoint", type=Path, help=checkpoint_help)
    parser.add_argument("--data", type=Path, required=True, help=data_help)
    parser.add_argument("--split", default=split, help="the split to score")


def add_conversion_arguments(parser: argparse.ArgumentParser, source: str, source_help: str, out_help: str) -> None:
    """``SOURCE --out DIR [--force] [--json]``: a checkpoint read, the directory its
    conversion is written to (:mod:`longformer_fs.output`), and how the report is
    printed (:func:`print_report`)."""
    parser.add_argument(source, type=Path, help=source_help)
    parser.add_argument("--out", type=Path, required=True, help=out_help)
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what OUT holds even when it is not this command's output from the same source "
        "(without it, OUT must be absent, empty, or such an output, which is refreshed)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def print_report(report: dict, as_json: bool, summary: Callable[[dict], Iterable[str]]) -> int:
    """``report`` as indented JSON, or as the lines of ``summary(report)``. Returns the
    command's exit status, 0."""
    for line in [json.dumps(report, indent=2)] if as_json else summary(report):
        print(line)
    return 0


def add_split_arguments(parser, files: str, input_help: str, items: str, fraction: float = 0.1) -> None:
    """``--train/--valid/--test FILE`` (help: "the SPLIT ``files``"), or ``--input FILE``
    (``input_help``) split by ``--valid-fraction`` and ``--test-fraction`` (default
    ``fraction`` each, of the ``items``: "examples", "pairs")."""
    for split in SPLIT_NAMES:
        parser.add_argument(f"--{split}", type=Path, metavar="FILE", help=f"the {split} {files}")
    parser.add_argument("--input", type=Path, metavar="FILE", help=f"instead of split files: {input_help}")
    for split in ("valid", "test"):
        parser.add_argument(
            f"--{split}-fraction",
            type=float,
            default=fraction,
            help=f"with --input: share of {items} for {split} (at least one when above 0)",
        )


def split_files(args: argparse.Namespace) -> dict[str, Path]:
    """``{split: path}`` of the ``--train/--valid/--test`` options given."""
    return {split: getattr(args, split) for split in SPLIT_NAMES if getattr(args, split) is not None}


def run_preparation(
    prepare: Callable, cfg, args: argparse.Namespace, stats_table: Callable, report: Callable | None = None
) -> int:
    """``prepare(cfg, args.out, args.force)``, then its report: the stats table, the lines
    ``report(result)`` yields (what else the user should see), and where the output went
    and how long it took. Returns the command's exit status, 0."""
    start = time.perf_counter()
    result = prepare(cfg, args.out, args.force)
    seconds = time.perf_counter() - start
    print(stats_table(result))
    for line in report(result) if report is not None else ():
        print(line)
    print(f"{args.out}: done in {seconds:.1f} s (stats in {args.out / 'stats.json'})")
    return 0


def symbol_report(result: dict) -> Iterator[str]:
    """The ids that the special symbols a preparation appended to ``dict.txt`` got."""
    yield "symbol ids: " + ", ".join(f"{symbol}={i}" for symbol, i in result["symbols"].items())


def dropped_report(title: str, dropped: dict, shown: int = 10) -> Iterator[str]:
    """``title count (n reason, ...)`` and the first ``shown`` examples (``origin: reason``)
    of a preparation's ``{"count", "by_reason", "examples"}`` record of inputs it left out."""
    reasons = ", ".join(f"{n} {reason}" for reason, n in dropped.get("by_reason", {}).items())
    yield f"{title} {dropped['count']:,}" + (f" ({reasons})" if reasons else "")
    for example in dropped["examples"][:shown]:
        yield f"  {example['origin']}: {example['reason']}"


def comma_triple(convert: Callable, valid: Callable[[tuple], bool], expected: str) -> Callable[[str], tuple]:
    """An argparse type for ``TRAIN,VALID,TEST``: three ``convert``-ed numbers that ``valid`` accepts.

    A bad value is an error that says ``expected TRAIN,VALID,TEST <expected>, got '<text>'``.
    """

    def parse(text: str) -> tuple:
        try:
            values = tuple(convert(x) for x in text.split(","))
        except ValueError:
            values = ()
        if len(values) != 3 or not valid(values):
            raise argparse.ArgumentTypeError(f"expected TRAIN,VALID,TEST {expected}, got {text!r}")
        return values

    return parse


def default_device() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu`` (:func:`longformer_fs.devices.default_device`)."""
    from .. import devices

    return devices.default_device()


def add_device_argument(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--device``, by default :func:`default_device`."""
    parser.add_argument("--device", default=default_device(), help=help)
