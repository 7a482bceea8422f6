"""The shipped Hydra recipes (``recipes/`` in the checkout) read as Python values.

The recipes are the source of truth for the paper's schedules; code that needs their
numbers (the demo's toy scale, ``bench lm``) reads them here instead of typing them again.
The fine-tuning recipes' schedules are written for the paper's datasets;
:func:`finetune_overrides` refits them to a prepared one, and ``python -m
longformer_fs.recipes`` is that for the Makefile's ``finetune-*`` targets.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from . import checkout
from .conventions import HOTPOTQA_SYMBOLS, MANIFEST, WIKIHOP_SYMBOLS, PrepKind

RECIPES = checkout.ROOT / "recipes"  # the Hydra configs, in the checkout (longformer_fs.checkout)
CHAR_LM_SIZES = ("small", "large")
CHAR_LM_PHASES = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class CharLMPhase:
    """One phase of the character-LM schedule (``recipes/char_lm/{size}_phase{phase}.yaml``).

    Attributes:
        tokens_per_sample: training sequence length, in characters.
        windows: one-sided windows of the bottom and top layers (geometric in between).
        lr: learning rate after warmup.
        batch_size: sequences per update (before update_freq and processes).
        max_update, warmup_updates: the phase's steps.
        model: the size preset (``recipes/char_lm/model/{size}.yaml``): layers, width,
            heads, ``attention_dilation``, ``dilated_heads``, dropout...
    """

    size: str
    phase: int
    tokens_per_sample: int
    windows: tuple[int, int]
    lr: float
    batch_size: int
    max_update: int
    warmup_updates: int
    model: dict

    @property
    def config_name(self) -> str:
        return f"{self.size}_phase{self.phase}"

    @property
    def attention_window(self) -> str:
        """The windows in ``--attention-window`` syntax (``"lo:hi"``)."""
        return f"{self.windows[0]}:{self.windows[1]}"


def char_lm_dir() -> Path:
    """``recipes/char_lm``; a clear error outside a checkout."""
    path = RECIPES / "char_lm"
    if not path.is_dir():
        raise FileNotFoundError(f"recipes: {path} not found; the recipes ship with the checkout, not the wheel")
    return path


def phase_settings(size: str, phase: int) -> CharLMPhase:
    """The recipe of ``size`` ("small" or "large") and ``phase`` (1-5)."""
    if size not in CHAR_LM_SIZES or phase not in CHAR_LM_PHASES:
        raise ValueError(f"char-LM recipe: size must be one of {CHAR_LM_SIZES} and phase 1-5, got {size!r}, {phase!r}")
    directory = char_lm_dir()
    recipe = OmegaConf.load(directory / f"{size}_phase{phase}.yaml")
    model = OmegaConf.to_container(OmegaConf.load(directory / "model" / f"{size}.yaml"))
    lo, hi = (int(x) for x in str(recipe.model.attention_window).split(":"))
    return CharLMPhase(
        size=size,
        phase=phase,
        tokens_per_sample=int(recipe.task.tokens_per_sample),
        windows=(lo, hi),
        lr=float(recipe.optimization.lr[0]),
        batch_size=int(recipe.dataset.batch_size),
        max_update=int(recipe.optimization.max_update),
        warmup_updates=int(recipe.lr_scheduler.warmup_updates),
        model=model,
    )


# ---------------------------------------------------------------- fine-tuning


@dataclass(frozen=True)
class FinetuneRecipe:
    """One row of the fine-tuning table: ``recipes/finetune/{name}.yaml`` and what runs around it.

    Attributes:
        prep: the ``longformer-fs prep`` kind its data comes from (the manifest's ``kind``).
        dictionary: where that data keeps the model's ``dict.txt``.
        counted: what the manifest counts as one training item (one sequence of the batch).
        warmup_fraction: warmup as a share of the updates (Appendix B), or None for the
            recipe's fixed warmup (Table 13).
        batch: the paper's batch, in items.
        new_tokens: symbols the data adds to the dictionary, which the model must have.
        metric: the dev metric fairseq validates, summarised over seeds; or, when None,
        evaluate: the ``longformer-fs`` command that scores each run's best checkpoint.
    """

    prep: str
    dictionary: str
    counted: str
    warmup_fraction: float | None = None
    batch: int = 32
    new_tokens: tuple[str, ...] = ()
    metric: str | None = None
    evaluate: str | None = None


# Coreference follows Joshi et al.'s implementation: 10% warmup, one document per update.
FINETUNE = {
    "imdb": FinetuneRecipe(PrepKind.CLASSIFICATION, "input0/dict.txt", "documents", 0.1, metric="accuracy"),
    "hyperpartisan": FinetuneRecipe(PrepKind.CLASSIFICATION, "input0/dict.txt", "documents", 0.1, metric="f1"),
    "triviaqa": FinetuneRecipe(PrepKind.QA, "dict.txt", "windows", evaluate="eval-qa"),
    "wikihop": FinetuneRecipe(PrepKind.WIKIHOP, "dict.txt", "examples", new_tokens=WIKIHOP_SYMBOLS, metric="accuracy"),
    "hotpotqa": FinetuneRecipe(
        PrepKind.HOTPOTQA, "dict.txt", "examples", new_tokens=HOTPOTQA_SYMBOLS, evaluate="eval-hotpotqa"
    ),
    "coref": FinetuneRecipe(PrepKind.COREF, "dict.txt", "documents", 0.1, batch=1, evaluate="eval-coref"),
}
FINETUNE_TASKS = tuple(FINETUNE)  # the Makefile's finetune-* targets (it reads this table's keys)
# What a fine-tuning run takes from the checkpoint it starts from rather than from the
# recipe (written for Longformer-base): the settings that shape the weights or what they
# compute. So a large, a longer or an imported model fine-tunes with the same command.
MODEL_SETTINGS = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                  "activation_fn", "max_positions", "attention_window", "attention_dilation", "causal_attention",
                  "encoder_normalize_before", "layernorm_embedding", "untie_weights_roberta")  # fmt: skip


class RecipeError(ValueError):
    """A recipe cannot run on the given data or model; the message says what to do."""


def finetune_dir() -> Path:
    path = RECIPES / "finetune"
    if not path.is_dir():
        raise RecipeError(f"recipes: {path} not found; the recipes ship with the checkout, not the wheel")
    return path


def finetune_overrides(name: str, data: Path, nproc: int = 1, model: Path | None = None) -> list[str]:
    """Hydra overrides that fit ``recipes/finetune/{name}.yaml`` to a prepared dataset.

    The recipe's schedule is written for the paper's dataset; this recomputes it from the
    number of training items ``prep`` recorded: ``epochs x ceil(items / batch)`` updates,
    warmup as the paper's rule for the task, and ``update_freq`` so that a batch stays the
    paper's (32 sequences; one document for coreference) over ``nproc`` processes.

    Raises:
        RecipeError: unknown recipe, ``data`` not prepared for it, a batch of 32 that does
            not split over ``nproc``, or ``model``'s ``dict.txt`` (when there is one beside
            it) different from the data's.
    """
    if name not in FINETUNE_TASKS:
        raise RecipeError(f"no fine-tuning recipe {name!r}; choose from {', '.join(FINETUNE_TASKS)}")
    row = FINETUNE[name]
    kind = row.prep
    data = Path(data)
    try:
        manifest = json.loads((data / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if not manifest or manifest.get("kind") != kind:
        raise RecipeError(
            f"DATA={data} is not a finished `longformer-fs prep {kind}` directory (no {MANIFEST} of that kind)"
        )
    items = manifest.get("splits", {}).get("train", {}).get(row.counted)
    if not items:
        raise RecipeError(f"DATA={data} has no train split; prepare one with `longformer-fs prep {kind} --train ...`")
    shape = []
    if model is not None:
        _check_dictionary(Path(model), data / row.dictionary, row.new_tokens)
        shape = model_overrides(Path(model))

    recipe = OmegaConf.load(finetune_dir() / f"{name}.yaml")
    batch_size = int(recipe.dataset.batch_size)
    paper_batch = row.batch
    if paper_batch % (batch_size * nproc):
        raise RecipeError(
            f"a batch of {paper_batch} does not split over {nproc} processes of {batch_size}; "
            "pick NPROC dividing it or set dataset.batch_size in HYDRA_ARGS"
        )
    epochs = int(recipe.optimization.max_epoch)
    total = epochs * math.ceil(items / paper_batch)
    if row.warmup_fraction is not None:
        warmup = max(1, round(row.warmup_fraction * total))
    else:
        warmup = min(int(recipe.lr_scheduler.warmup_updates), total)
    return [
        f"optimization.update_freq=[{paper_batch // (batch_size * nproc)}]",
        f"optimization.max_update={total}",
        f"lr_scheduler.total_num_update={total}",
        f"lr_scheduler.warmup_updates={warmup}",
        *shape,
    ]


def _hydra_value(value) -> str:
    """``value`` as a Hydra override writes it; strings quoted, so ``'2,4'`` is not a sweep
    and ``'256'`` stays the string the model's argparse-style settings expect."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return str(value)


def model_overrides(model: Path) -> list[str]:
    """Hydra overrides that set a fine-tuning recipe's model to ``model``'s own: its
    architecture, each of :data:`MODEL_SETTINGS` it records (``++``: a recipe names only
    some), and the task's ``max_positions``, the longest input the model takes.

    Raises:
        RecipeError: not a ``longformer_roberta`` checkpoint.
        CheckpointError: not a readable fairseq checkpoint.
    """
    from .checkpoint import Checkpoint, Kind, NotOursError
    from .fairseq_format import config_get

    ours = Checkpoint.read(model, upgrade=False)  # the light read: make need not import fairseq
    try:
        kind = ours.kind
    except NotOursError:
        kind = None
    if kind is not Kind.ENCODER:
        raise RecipeError(
            f"MODEL={model} is a {ours.name!r} checkpoint; the fine-tuning recipes take a longformer_roberta one "
            "(from longformer-fs convert-roberta, import-hf or an MLM run)"
        )
    cfg = ours.model_cfg
    overrides = [f"model._name={ours.name}"]
    for key in MODEL_SETTINGS:
        value = config_get(cfg, key)
        if value is not None:
            overrides.append(f"++model.{key}={_hydra_value(value)}")
    if config_get(cfg, "max_positions") is not None:
        overrides.append(f"task.max_positions={config_get(cfg, 'max_positions')}")
    return overrides


def _check_dictionary(model: Path, data_dict: Path, new_tokens: tuple[str, ...]) -> None:
    """``model``'s dict.txt, if one sits beside it, must be the data's."""
    if not model.is_file():
        raise RecipeError(f"MODEL={model} does not exist; give a longformer_roberta checkpoint (.pt)")
    model_dict = model.parent / "dict.txt"
    if model_dict.is_file() and model_dict.read_bytes() != data_dict.read_bytes():
        hint = (
            f"convert with `longformer-fs convert-roberta --add-tokens '{','.join(new_tokens)}'` and prepare the data "
            "with that dict.txt"
            if new_tokens
            else "prepare the data with --dict pointing at the model's dict.txt"
        )
        raise RecipeError(f"{data_dict} differs from the model's {model_dict}; {hint}")


def best_metrics(checkpoints: list[Path]) -> list[float]:
    """The best validation metric fairseq recorded in each ``checkpoint_best.pt``."""
    from .fairseq_format import read_checkpoint

    values = []
    for path in checkpoints:
        state = read_checkpoint(path, upgrade=False)
        best = state.get("extra_state", {}).get("best")
        if best is None:
            raise RecipeError(f"{path} records no best validation metric; was it validated?")
        values.append(float(best))
    return values


def report(name: str, data: Path, checkpoints: list[Path]) -> int:
    """What ``make finetune-NAME`` prints after its runs: the best dev metric of each run and
    their mean and spread over seeds, or each run's best checkpoint scored by the task's
    ``longformer-fs eval-*`` command on ``data``. Returns the exit status."""
    row = FINETUNE[name]
    if row.metric is not None:
        values = best_metrics(checkpoints)
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        for path, value in zip(checkpoints, values, strict=True):
            print(f"{path}: best {row.metric} {value:.2f}")
        print(f"{row.metric} over {len(values)} seeds: mean {statistics.mean(values):.2f}, std {spread:.2f}")
        return 0
    from .cli import main as longformer_fs

    for checkpoint in checkpoints:
        code = longformer_fs([row.evaluate, str(checkpoint), "--data", str(data)])
        if code:
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    """The Makefile's helper: ``python -m longformer_fs.recipes finetune-overrides|report``."""
    parser = argparse.ArgumentParser(
        prog="python -m longformer_fs.recipes",
        description="Helpers of the Makefile's finetune-* targets: fit a fine-tuning recipe's schedule to a "
        "prepared dataset and a model, and report the runs (the best dev metric over seeds, or the task's own "
        "evaluation of each run).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("finetune-overrides", help="print the Hydra overrides fitting a fine-tuning recipe to DATA")
    fit.add_argument("name", choices=FINETUNE_TASKS, help="the recipe")
    fit.add_argument("data", type=Path, help="the prepared dataset")
    fit.add_argument("--nproc", type=int, default=1, help="training processes (GPUs) in all")
    fit.add_argument("--model", type=Path, help="the checkpoint to start from (its dict.txt and settings are read)")
    done = sub.add_parser("report", help="the best metric over seeds, or the task's evaluation of each run")
    done.add_argument("name", choices=FINETUNE_TASKS, help="the recipe")
    done.add_argument("data", type=Path, help="the prepared dataset")
    done.add_argument("checkpoints", type=Path, nargs="+", help="each run's checkpoint_best.pt")
    args = parser.parse_args(argv)
    try:
        if args.command == "finetune-overrides":
            print(" ".join(finetune_overrides(args.name, args.data, args.nproc, args.model)))
            return 0
        return report(args.name, args.data, args.checkpoints)
    except (ValueError, OSError) as err:  # RecipeError, an unreadable checkpoint (CheckpointError)
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
