"""A model directory as the HF hub serves it: ``config.json`` and the weights.

The weights come as ``model.safetensors`` or ``pytorch_model.bin``, or as shards of either
listed by an index (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``).
They are read once: the tensors returned are the ones the files hold, not copies. The
tokenizer files are :mod:`longformer_fs.hf_format.tokenizer_files`'.

Every problem is a :class:`HFDirectoryError` that names the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .released import NotConvertibleError

CONFIG = "config.json"
# (single file, index of shards), in the order the hub's loaders prefer them.
WEIGHT_FILES = (
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)


class HFDirectoryError(NotConvertibleError):
    """The directory is not a readable HF model directory; the message names the file."""


@dataclass
class HFModelDirectory:
    """What a hub model directory holds.

    Attributes:
        path: the directory.
        config: ``config.json`` as a dict.
        weights: ``{HF key: tensor}`` as stored (tied copies the files omit are absent).
        weight_files: the files the weights came from.
    """

    path: Path
    config: dict
    weights: dict = field(repr=False)
    weight_files: list[Path]

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def files(self) -> list[Path]:
        """The files the model was read from: ``config.json`` and the weights."""
        return [self.path / CONFIG, *self.weight_files]


def read_config(path: Path) -> dict:
    """``path/config.json``; an error that names it when it is missing or not JSON."""
    path = Path(path)
    if not path.is_dir():
        raise HFDirectoryError(f"{path}: not a directory; give a model directory as the HF hub serves it")
    config = path / CONFIG
    if not config.is_file():
        raise HFDirectoryError(
            f"{config}: not found; a model directory as the HF hub serves it holds config.json, the weights "
            "(model.safetensors or pytorch_model.bin) and the tokenizer"
        )
    try:
        value = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HFDirectoryError(f"{config}: not JSON ({err})") from None
    if not isinstance(value, dict):
        raise HFDirectoryError(f"{config}: not a JSON object")
    return value


def _load_file(path: Path) -> dict:
    if not path.is_file():
        raise HFDirectoryError(f"{path}: not found")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as err:
            raise HFDirectoryError(f"{path}: cannot be read as safetensors, truncated or corrupt ({err})") from None
    try:  # zip checkpoints (torch >= 1.6) map into memory; older pickles load whole
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # zip, pickle and unpickler errors alike: the file is the problem
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HFDirectoryError(
            f"{path}: cannot be read as a torch checkpoint, truncated or corrupt ({message})"
        ) from None


def read_weights(path: Path) -> tuple[dict, list[Path]]:
    """Every tensor of the directory's weights, and the files they came from.

    Raises:
        HFDirectoryError: no weights file, a shard the index names is missing, a file that
            cannot be read (truncated, corrupt), or a tensor the index lists but its shard lacks.
    """
    path = Path(path)
    for single, index in WEIGHT_FILES:
        if (path / single).is_file():
            weights = _load_file(path / single)
            if not isinstance(weights, dict):
                raise HFDirectoryError(f"{path / single}: holds no state dict")
            return weights, [path / single]
        if (path / index).is_file():
            try:
                weight_map = json.loads((path / index).read_text(encoding="utf-8"))["weight_map"]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
                raise HFDirectoryError(f"{path / index}: not a shard index with a weight_map ({err})") from None
            shards = [path / name for name in dict.fromkeys(weight_map.values())]
            weights = {}
            for shard in shards:
                weights.update(_load_file(shard))
            missing = [key for key in weight_map if key not in weights]
            if missing:
                raise HFDirectoryError(
                    f"{path / weight_map[missing[0]]}: lacks {len(missing)} tensor(s) that {index} lists "
                    f"(e.g. {missing[0]!r})"
                )
            return weights, shards
    names = ", ".join(name for pair in WEIGHT_FILES for name in pair)
    raise HFDirectoryError(f"{path}: no weights ({names})")
