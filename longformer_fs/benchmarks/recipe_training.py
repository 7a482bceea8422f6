"""The recipe's training settings, for the end-to-end benches.

``bench lm``, ``led`` and ``finetune`` train as their recipe does: :func:`recipe_settings`
reads a recipe's dropout, attention dropout, precision and activation checkpointing;
:func:`add_training_arguments` gives the flags that override each; and
:func:`recipe_training` (:func:`training_of` from parsed flags) says how a bench trains on
a device, as a :class:`Training`. Our models (not the peers) also train with compiled
layers on CUDA (``compile_layers``: :mod:`longformer_fs.modules.compiled`), eager elsewhere.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .. import checkout, devices
from ..precision import unsupported_precision
from .measure import check_device


@dataclasses.dataclass(frozen=True)
class Training:
    """How a bench's models train: the recipe's settings, with the flags that override them.

    Attributes:
        recipe: the recipe file read, relative to the checkout (``recipes/...yaml``).
        precision: what the step runs in: ``fp32``, ``fp16`` or ``bf16``.
        recipe_precision: what the recipe sets (``common.fp16`` / ``common.bf16``); without
            CUDA the recipes train in float32 (``longformer_fs.precision.FitToDevice``), and
            so does the bench.
        dropout: the model's dropout probability.
        attention_dropout: the dropout on attention probabilities.
        checkpoint_activations: layers recompute their activations in the backward.
        compile_layers: our models' layers run ``torch.compile``d while they train (one
            compiled region per layer type, :mod:`longformer_fs.modules.compiled`); the peers
            run as their own code does. On by default on CUDA, off elsewhere (inductor on a
            CPU takes minutes a graph, and nobody trains there).
        overridden: the settings a flag set rather than the recipe.
    """

    recipe: str
    precision: str
    recipe_precision: str
    dropout: float
    attention_dropout: float
    checkpoint_activations: bool
    compile_layers: bool = False
    overridden: tuple[str, ...] = ()

    def figures(self) -> dict:
        """The settings as JSON-able figures for a result."""
        return {**dataclasses.asdict(self), "overridden": list(self.overridden)}

    def describe(self) -> str:
        """One line, e.g. ``fp16, dropout 0.1, attention dropout 0.1, activation checkpointing,
        compiled layers``."""
        precision = self.precision
        if self.precision != self.recipe_precision and "precision" not in self.overridden:
            precision += f" (the recipe's {self.recipe_precision} does not run here)"
        parts = [precision, f"dropout {self.dropout:g}", f"attention dropout {self.attention_dropout:g}"]
        parts.append("activation checkpointing" if self.checkpoint_activations else "no activation checkpointing")
        parts.append("compiled layers" if self.compile_layers else "eager layers")
        source = f"as {self.recipe} trains" + (
            f", but {', '.join(self.overridden)} from flags" if self.overridden else ""
        )
        return f"{', '.join(parts)} ({source})"


def add_training_arguments(parser, recipe: str) -> None:
    """The flags that override how ``recipe`` trains, in a group of their own whose
    description gives the defaults; a flag not given is absent from ``args``."""
    group = parser.add_argument_group(
        "training (default: as the recipe trains)",
        f"Every model compared trains as {recipe} does: its model.dropout, model.attention_dropout and "
        "model.checkpoint_activations (off where it does not say), and its precision (common.fp16 / common.bf16) "
        "on CUDA; without CUDA in float32, as the recipes fit themselves to the machine. Our models (not the "
        "peers) run their layers torch.compile'd on CUDA, eagerly elsewhere. A flag here overrides that one setting.",
    )
    precision = group.add_mutually_exclusive_group()
    for flag, what in (("fp16", "float16"), ("bf16", "bfloat16")):
        precision.add_argument(
            f"--{flag}", action="store_true", default=argparse.SUPPRESS,
            help=f"train in {what} (CUDA), as fairseq's --{flag} does: the model cast to it, the loss in float32 "
            "(HF's peer: autocast, as its Trainer)",
        )  # fmt: skip
    precision.add_argument("--fp32", action="store_true", default=argparse.SUPPRESS, help="train in float32")
    group.add_argument("--dropout", type=float, default=argparse.SUPPRESS, metavar="P", help="the models' dropout")
    group.add_argument(
        "--attention-dropout", type=float, default=argparse.SUPPRESS, metavar="P",
        help="dropout on the attention probabilities",
    )  # fmt: skip
    group.add_argument(
        "--checkpoint-activations", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
        help="recompute each layer's activations in the backward",
    )  # fmt: skip
    group.add_argument(
        "--compile-layers", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
        help="torch.compile our models' layers while they train, one compiled region per layer type (the peers "
        "run as their own code does; default: on with CUDA, off elsewhere)",
    )  # fmt: skip


def recipe_settings(recipe: Path) -> dict:
    """The training settings ``recipe`` (a fairseq-hydra-train YAML) sets: ``precision``
    (``fp16`` / ``bf16`` / ``fp32``), ``dropout``, ``attention_dropout`` and
    ``checkpoint_activations``. A ``model: NAME`` default (the char-LM recipes) is read from
    ``model/NAME.yaml`` beside it, the recipe's own ``model:`` over it, as Hydra composes them.

    Raises:
        FileNotFoundError: no such recipe (outside a checkout the recipes are absent).
        ValueError: the recipe sets no dropout or attention dropout.
    """
    from omegaconf import OmegaConf

    recipe = Path(recipe)
    if not recipe.is_file():
        raise FileNotFoundError(
            f"recipe {recipe} not found (the recipes ship with the checkout, not the wheel); "
            "give --dropout, --attention-dropout, --(no-)checkpoint-activations and a precision flag instead"
        )
    config = OmegaConf.load(recipe)
    model: dict = {}
    for entry in config.get("defaults") or []:
        if not isinstance(entry, str) and "model" in entry:
            model.update(OmegaConf.to_container(OmegaConf.load(recipe.parent / "model" / f"{entry['model']}.yaml")))
    model.update(OmegaConf.to_container(config.get("model") or OmegaConf.create({})))
    common = config.get("common") or {}
    missing = [key for key in ("dropout", "attention_dropout") if model.get(key) is None]
    if missing:
        raise ValueError(f"recipe {recipe} sets no model.{' or model.'.join(missing)}")
    precision = "bf16" if common.get("bf16") else "fp16" if common.get("fp16") else "fp32"
    return {
        "precision": precision,
        "dropout": float(model["dropout"]),
        "attention_dropout": float(model["attention_dropout"]),
        "checkpoint_activations": bool(model.get("checkpoint_activations") or False),
    }


def recipe_training(
    recipe: Path, device: str, *, precision: str | None = None, dropout: float | None = None,
    attention_dropout: float | None = None, checkpoint_activations: bool | None = None,
    compile_layers: bool | None = None,
) -> Training:  # fmt: skip
    """How a bench trains on ``device``: ``recipe``'s settings, each one given here instead
    overriding it. Without a precision given, the recipe's on CUDA (bf16 where the GPU has
    it) and float32 elsewhere, as :class:`longformer_fs.precision.FitToDevice` fits the
    recipes; a half precision given off CUDA is an error. Without ``compile_layers`` given,
    our models compile their layers on CUDA and run them eagerly elsewhere (the recipes
    leave it off, but a bench times what a trained model runs on the GPU; inductor on a CPU
    takes minutes a graph).

    The recipe is read only for the settings not given (it may be absent when all are).

    Raises:
        ValueError: a precision the device cannot run, a probability outside [0, 1).
        FileNotFoundError: the recipe is needed and absent.
    """
    given = {"precision": precision, "dropout": dropout, "attention_dropout": attention_dropout,
             "checkpoint_activations": checkpoint_activations, "compile_layers": compile_layers}  # fmt: skip
    for name in ("dropout", "attention_dropout"):
        if given[name] is not None and not 0 <= given[name] < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag}: expected a probability in [0, 1), got {given[name]:g}")
    if precision is not None:
        check_device(device, precision)
    elif devices.on_gpu(device):
        check_device(device, "fp32")
    needed = [name for name, value in given.items() if value is None and name != "compile_layers"]
    settings = recipe_settings(recipe) if needed else {"precision": precision}
    recipe_precision = settings["precision"]
    if precision is None:  # the recipe's, fitted to the device as FitToDevice fits a recipe's run
        common = {recipe_precision: recipe_precision != "fp32", "cpu": not devices.on_gpu(device)}
        precision = "fp32" if unsupported_precision(common)[0] else recipe_precision
    try:
        shown = str(Path(recipe).resolve().relative_to(checkout.ROOT))
    except ValueError:
        shown = str(recipe)
    return Training(
        recipe=shown,
        precision=precision,
        recipe_precision=recipe_precision,
        dropout=float(dropout if dropout is not None else settings["dropout"]),
        attention_dropout=float(attention_dropout if attention_dropout is not None else settings["attention_dropout"]),
        checkpoint_activations=bool(
            checkpoint_activations if checkpoint_activations is not None else settings["checkpoint_activations"]
        ),
        compile_layers=bool(compile_layers if compile_layers is not None else devices.on_gpu(device)),
        overridden=tuple(name for name, value in given.items() if value is not None),
    )


def training_of(args, recipe: Path) -> Training:
    """:func:`recipe_training` from a bench's parsed flags (:func:`add_training_arguments`)."""
    flags = [name for name in ("fp16", "bf16", "fp32") if getattr(args, name, False)]
    precision = flags[0] if flags else None
    return recipe_training(
        recipe,
        args.device,
        precision=precision,
        dropout=getattr(args, "dropout", None),
        attention_dropout=getattr(args, "attention_dropout", None),
        checkpoint_activations=getattr(args, "checkpoint_activations", None),
        compile_layers=getattr(args, "compile_layers", None),
    )


def warmup_steps(device: str, compile_layers: bool, steps: int) -> int:
    """Warm-up steps before a bench times ``steps`` of them eagerly: at least two on CUDA
    with compiled layers, since a shape's first two steps compile them (static, then
    dynamic shapes) and timing starts after both."""
    return max(steps, 2) if compile_layers and devices.on_gpu(device) else steps
