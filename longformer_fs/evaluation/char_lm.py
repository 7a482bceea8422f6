"""Test BPC of a character-LM checkpoint with the paper's overlapping-window protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import torch
from fairseq.data import data_utils

from ..checkpoint import load_model
from .sliding_window import BpcResult, sliding_window_bpc


def read_split(task, data: Path, split: str) -> torch.Tensor:
    """A split of a ``longformer-fs prep`` character corpus as one ``(N,)`` stream of ids."""
    dataset = data_utils.load_indexed_dataset(str(Path(data) / split), task.source_dictionary, "mmap")
    if dataset is None:
        raise FileNotFoundError(f"--split: {Path(data) / split}.bin/.idx not found")
    return torch.cat([dataset[i] for i in range(len(dataset))]).long()


def score_checkpoint(
    checkpoint: Path,
    data: Path,
    split: str,
    window: int,
    step: int,
    batch_size: int,
    device: str,
    progress: Callable[[Iterator], Iterator] = lambda it: it,
) -> tuple[BpcResult, int]:
    """The protocol on one split; returns the result and the split's length in characters.

    Raises:
        RuntimeError: the protocol did not score every character exactly once.
    """
    model, task = load_model(checkpoint, data, device)
    chars = read_split(task, data, split)

    def log_probs(inputs):
        with torch.no_grad():
            logits = model(inputs.to(device))[0]
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    result = sliding_window_bpc(log_probs, chars, task.source_dictionary.eos(), window, step, batch_size, progress)
    if result.scored != len(chars):
        raise RuntimeError(f"scored {result.scored} characters of {len(chars)}: the protocol is broken")
    return result, len(chars)
