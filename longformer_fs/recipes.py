"""The shipped Hydra recipes (``recipes/`` in the checkout) read as Python values.

The recipes are the source of truth for the paper's schedules; code that needs their
numbers (the demo's toy scale, ``bench lm``) reads them here instead of typing them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
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
            heads, ``attention_dilations``, ``dilated_heads``, dropout...
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
    def attention_windows(self) -> str:
        """The windows in ``--attention-windows`` syntax (``"lo:hi"``)."""
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
    lo, hi = (int(x) for x in str(recipe.model.attention_windows).split(":"))
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
