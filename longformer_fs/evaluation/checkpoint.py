"""Loading a trained fairseq checkpoint, with its task, for evaluation and inference."""

from __future__ import annotations

from pathlib import Path

import torch
from fairseq import checkpoint_utils


def load_model(
    checkpoint: Path,
    data: Path | None = None,
    device: str | torch.device = "cpu",
    overrides: dict | None = None,
    state: dict | None = None,
):
    """The checkpoint's model (in eval mode, on ``device``) and its task.

    Args:
        checkpoint: a ``.pt`` file written by fairseq-train (or a converter).
        data: the dataset directory the task should read (its dictionaries), when it
            differs from the one recorded at training time.
        overrides: further task/model settings, as fairseq's ``arg_overrides``.
        state: the checkpoint already read (``checkpoint_utils.load_checkpoint_to_cpu``),
            to read it once.

    Raises:
        FileNotFoundError: no such checkpoint.
    """
    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"checkpoint: {checkpoint} does not exist")
    arg_overrides = dict(overrides or {})
    if data is not None:
        arg_overrides["data"] = str(data)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides=arg_overrides, state=state
    )
    return models[0].to(device).eval(), task
