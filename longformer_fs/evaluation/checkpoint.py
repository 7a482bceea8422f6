"""Loading a trained fairseq checkpoint, with its task, for evaluation and inference, and
running a prepared split through it batch by batch.

A task is set up from a data directory, which holds its dictionaries.
:func:`dictionary_data` gives one for a checkpoint whose data is not at hand: the data it
was trained on where it still is, else the model's ``dict.txt`` laid out as its task reads
dictionaries (an imported or converted model's directory holds only that).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

import torch
from fairseq import checkpoint_utils, utils
from fairseq.dataclass.utils import overwrite_args_by_name
from tqdm import tqdm

from ..checkpoint_files import config_get, find_dictionary, read_checkpoint, task_dictionary
from ..conventions import SOURCE, TARGET


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


@contextlib.contextmanager
def dictionary_data(
    checkpoint: Path, state: dict, data: Path | None = None, dictionary: Path | None = None
) -> Iterator[tuple[Path, dict]]:
    """A data directory to set the checkpoint's task up from, and the task settings that go
    with it (``arg_overrides``).

    ``data`` when given; else the data the checkpoint was trained on, when its
    dictionaries are there; else a temporary directory holding the model's ``dict.txt``
    (``dictionary``, by default :func:`~longformer_fs.checkpoint_files.find_dictionary`'s)
    where the task reads it:
    ``dict.{source,target}.txt`` for ``translation`` (LED), ``input0/dict.txt`` and the
    classes' ``label/dict.txt`` for ``sentence_prediction``, ``dict.txt`` for the others.
    The temporary directory is gone after the block: tasks read their dictionaries at set-up.
    """
    task = state["cfg"]["task"]
    name = config_get(task, "_name")
    overrides = {}
    if name == "translation":
        source, target = config_get(task, "source_lang", SOURCE), config_get(task, "target_lang", TARGET)
        overrides = {"source_lang": source, "target_lang": target}
    if data is not None:
        yield Path(data), overrides
        return
    trained = config_get(task, "data")
    trained = Path(str(trained).split(os.pathsep)[0]) if trained else None
    if dictionary is None and trained is not None and task_dictionary(task, trained).is_file():
        yield trained, overrides
        return
    dictionary = Path(dictionary) if dictionary is not None else find_dictionary(checkpoint, state)
    with tempfile.TemporaryDirectory() as tmp:
        if name == "translation":
            files = {f"dict.{lang}.txt": dictionary.read_bytes() for lang in (source, target)}
        elif name == "sentence_prediction":
            classes = int(config_get(task, "num_classes", 0))
            labels = "".join(f"{k} 1\n" for k in range(classes)).encode()
            files = {"input0/dict.txt": dictionary.read_bytes(), "label/dict.txt": labels}
        else:
            files = {"dict.txt": dictionary.read_bytes()}
        for relative, content in files.items():
            (Path(tmp) / relative).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / relative).write_bytes(content)
        yield Path(tmp), overrides
