"""Training precision that the machine can run: the recipes' Hydra callback.

fairseq's mixed precision (``common.fp16``, ``bf16``, ``amp`` and the memory-efficient
variants) trains on CUDA only. Without CUDA it dies deep inside its FP16 optimizer
(``torch.cuda.current_device()``: "Torch not compiled with CUDA enabled"), and a GPU
without bfloat16 cannot run ``bf16``. The recipes are written for GPUs and set
``common.fp16: true``, so on a laptop every fine-tuning, MLM and LED recipe would stop so.

:class:`FitToDevice` is a Hydra callback that every recipe declares (``hydra.callbacks``).
It runs once Hydra has composed the config and before fairseq reads it, under
``fairseq-hydra-train`` run directly as under ``make``:

- a precision the recipe sets and the machine cannot run is turned off, and one line says
  so, which settings changed and that the recipe's speed and schedule assume GPUs;
- a precision the user asked for (a command-line override, ``HYDRA_ARGS`` included) is
  refused in one line instead.
"""

from __future__ import annotations

import os
import sys

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

# fairseq's `common` settings that train in reduced precision.
PRECISION_SETTINGS = ("fp16", "bf16", "amp", "memory_efficient_fp16", "memory_efficient_bf16")


def unsupported_precision(common) -> tuple[list[str], str]:
    """The precision settings of ``common`` (fairseq's ``CommonConfig``) that this machine
    cannot train with, and why (empty when all can)."""
    from . import devices

    asked = [key for key in PRECISION_SETTINGS if common.get(key)]
    if not asked:
        return [], ""
    if common.get("cpu"):
        return asked, "common.cpu=true trains on the CPU, and fairseq's mixed precision runs on CUDA only"
    if not devices.cuda_runtime():
        return asked, "there is no CUDA device here, and fairseq's mixed precision runs on CUDA only"
    bf16 = [key for key in asked if "bf16" in key]
    if bf16 and not devices.bf16_supported():
        return bf16, f"this GPU ({devices.gpu_name()}) cannot compute in bfloat16"
    return [], ""


def overridden_keys(overrides) -> set[str]:
    """The config keys a list of Hydra overrides sets (``+common.fp16=true`` -> ``common.fp16``)."""
    return {item.lstrip("+~").split("=", 1)[0] for item in overrides}


class FitToDevice(Callback):
    """Fit a recipe's precision to the machine it runs on (see the module docstring)."""

    def on_run_start(self, config: DictConfig, config_name: str | None = None, **kwargs) -> None:
        keys, why = unsupported_precision(config.common)
        if not keys:
            return
        asked = sorted(
            f"common.{key}" for key in keys if f"common.{key}" in overridden_keys(config.hydra.overrides.task)
        )
        if asked:
            print(f"longformer-fs: error: {', '.join(asked)}: {why}; leave it out to train in float32", file=sys.stderr)
            raise SystemExit(2)
        with read_write(config), open_dict(config):
            for key in keys:
                config.common[key] = False
        if os.environ.get("RANK", "0") == "0":  # once per run, not per torchrun process
            changed = ", ".join(f"common.{key}=false" for key in keys)
            print(
                f"longformer-fs: {why}: recipe {config_name} trains in float32 ({changed}); "
                "its batch size, speed and schedule assume GPUs",
                file=sys.stderr,
            )
