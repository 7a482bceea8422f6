"""Loading a trained fairseq checkpoint, with its task, for evaluation and inference, and
running a prepared split through it batch by batch."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
from fairseq import checkpoint_utils, utils
from fairseq.dataclass.utils import overwrite_args_by_name
from tqdm import tqdm

from ..checkpoint_files import read_checkpoint


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
        state: the checkpoint already read (:func:`read_checkpoint`), to read it once.

    Raises:
        FileNotFoundError: no such checkpoint.
        CheckpointError: the file cannot be read as a fairseq checkpoint.
    """
    checkpoint = Path(checkpoint)
    if state is None:
        state = read_checkpoint(checkpoint)
    arg_overrides = dict(overrides or {})
    if data is not None:
        arg_overrides["data"] = str(data)
    if state.get("cfg") is not None:
        # fairseq applies arg_overrides only to a checkpoint it reads itself, and the task
        # would look for its dictionaries where the model was trained (or imported).
        overwrite_args_by_name(state["cfg"], arg_overrides)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides=arg_overrides, state=state
    )
    return models[0].to(device).eval(), task


def listed_split(task, split: str, items: str) -> tuple:
    """``split``'s dataset and its ``examples.jsonl`` listing (one dict per item, in order).

    Raises:
        ValueError: the two disagree in length (a split prepared again in part).
    """
    if split not in task.datasets:
        task.load_dataset(split)
    dataset, examples = task.dataset(split), task.examples(split)
    if len(examples) != len(dataset):
        raise ValueError(
            f"{split}: {len(examples)} {items} listed but {len(dataset)} prepared; prepare the split again"
        )
    return dataset, examples


def batches(
    dataset, batch_size: int, device: str | torch.device, desc: str, unit: str, progress: bool = True
) -> Iterator[tuple[list[dict], dict]]:
    """``dataset`` in file order, ``batch_size`` items at a time, under ``inference_mode``
    and a progress bar: each batch's items and their collated batch, its tensors on
    ``device``."""
    bar = tqdm(total=len(dataset), unit=unit, desc=desc, disable=not progress, leave=False)
    with torch.inference_mode():
        for first in range(0, len(dataset), batch_size):
            samples = [dataset[i] for i in range(first, min(first + batch_size, len(dataset)))]
            yield samples, utils.apply_to_sample(lambda t: t.to(device), dataset.collater(samples))
            bar.update(len(samples))
    bar.close()
