"""Running a prepared split through a loaded model (:meth:`longformer_fs.checkpoint.Checkpoint.load`),
batch by batch, as the ``eval-*`` commands do."""

from __future__ import annotations

from typing import Iterator

import torch
from fairseq import utils
from tqdm import tqdm


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
