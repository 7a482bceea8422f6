"""fairseq's checkpoint file format, whoever wrote the file (our models, and the releases
:mod:`longformer_fs.conversion.readers` reads): reading one safely, its settings, writing
one to start training from, and the dictionary that goes with one.

- a checkpoint's model settings, stored as an ``argparse.Namespace`` by pre-Hydra
  fairseq (the released RoBERTa and BART) and as a DictConfig since
  (:func:`model_config`, :func:`config_get`, :func:`config_set`, :func:`model_name`);
- :func:`save_start_checkpoint`: a checkpoint that ``fairseq-train`` starts from with a
  fresh optimizer, as converters write;
- :func:`read_checkpoint`: reading one as fairseq does, weights-only, with one
  :class:`CheckpointError` naming the file when it cannot;
  :func:`allow_argparse_checkpoints`: allowing those whose settings are an
  ``argparse.Namespace``;
- :func:`find_dictionary`: the model's ``dict.txt``, beside the checkpoint or in the data
  its task reads.

It knows fairseq's file format, not our models (their weights' layout is
:mod:`longformer_fs.models.weight_layout`), so every layer that reads checkpoints uses it.
"""

from __future__ import annotations

import argparse
import pickle
import re
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

from . import output
from .conventions import SOURCE, TARGET, first_data_directory


def model_config(state: dict):
    """The checkpoint's model settings: an ``argparse.Namespace`` or a DictConfig (or None)."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        return cfg["model"]
    return state.get("args")


def config_get(model_cfg, key: str, default=None):
    """``model_cfg.key`` for either kind of settings; ``default`` when absent or None."""
    value = getattr(model_cfg, key, None) if isinstance(model_cfg, argparse.Namespace) else model_cfg.get(key)
    return default if value is None else value


def config_set(model_cfg, **values) -> None:
    """Set keys on either kind of settings (new keys included)."""
    if isinstance(model_cfg, argparse.Namespace):
        for key, value in values.items():
            setattr(model_cfg, key, value)
        return
    with open_dict(model_cfg):
        for key, value in values.items():
            model_cfg[key] = value


def model_name(model_cfg) -> str | None:
    """The registered model or architecture name a checkpoint was trained as."""
    return config_get(model_cfg, "_name") or config_get(model_cfg, "arch")


def save_start_checkpoint(state: dict, weights: dict, path: Path) -> None:
    """Write ``weights`` with ``state``'s settings as a checkpoint to start training from.

    A fresh start: no optimizer state, update 0, no data-loader position. fairseq
    reads the last optimizer-history entry, so there is one. The file is written
    whole (:func:`longformer_fs.output.written_file`): a crash never leaves half a checkpoint.
    """
    cfg = state.get("cfg")
    checkpoint = {
        "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) if cfg is not None else None,
        "args": None if cfg is not None else state.get("args"),
        "model": weights,
        "optimizer_history": [
            {"criterion_name": "converted", "optimizer_name": "none", "lr_scheduler_state": {}, "num_updates": 0}
        ],
        "last_optimizer_state": None,
        "extra_state": {
            "train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0, "shuffle": True},
            "val_loss": None,
        },
    }
    with output.written_file(path) as staged:
        torch.save(checkpoint, staged)


def allow_argparse_checkpoints() -> None:
    """Let ``torch.load`` read checkpoints that pickle an ``argparse.Namespace``.

    torch >= 2.6 loads with ``weights_only=True``, which refuses them, and they are common:
    fairseq's releases from before Hydra (RoBERTa's, BART's) and every checkpoint of an
    argparse-style model trained with command-line flags (ours are such models) keep their
    settings so. Called where checkpoints are loaded, and when the plugin registers with
    fairseq, whose commands then load them (:mod:`longformer_fs.components`).
    """
    torch.serialization.add_safe_globals([argparse.Namespace])


def task_dictionaries(task_cfg) -> list[str]:
    """Where a task reads the model's dictionary in its data directory, relative to it, the
    first the one it reads the model's input by: ``dict.{source,target}.txt`` for
    ``translation`` (LED: one dictionary on both sides), ``input0/dict.txt`` for
    ``sentence_prediction`` (its classes are ``label/dict.txt``), ``dict.txt`` for the others."""
    name = config_get(task_cfg, "_name")
    if name == "translation":
        langs = config_get(task_cfg, "source_lang", SOURCE), config_get(task_cfg, "target_lang", TARGET)
        return [f"dict.{lang}.txt" for lang in dict.fromkeys(langs)]
    return ["input0/dict.txt" if name == "sentence_prediction" else "dict.txt"]


def task_dictionary(task_cfg, directory: Path) -> Path:
    """Where a task set up from ``directory`` reads the model's dictionary."""
    return Path(directory) / task_dictionaries(task_cfg)[0]


def find_dictionary(checkpoint: Path, state: dict, data: Path | None = None) -> Path:
    """The model's fairseq ``dict.txt``: the one beside the checkpoint (converters and
    ``import-hf`` put it there), else the one its task reads from ``data``, else from the
    data directory the checkpoint was trained on (``fairseq-train`` writes none beside
    its checkpoints, and records that directory).

    Raises:
        FileNotFoundError: none of them exists; the message names them and ``--dict``.
    """
    task = (state.get("cfg") or {}).get("task") or {}
    candidates = [Path(checkpoint).parent / "dict.txt"]
    for directory in (data, config_get(task, "data")):
        if directory:
            candidates.append(task_dictionary(task, first_data_directory(directory)))
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"--dict: the model's dictionary is in none of {', '.join(map(str, dict.fromkeys(candidates)))}; "
        "give it with --dict PATH"
    )


class CheckpointError(ValueError):
    """A file that cannot be read as a fairseq checkpoint; the message names it and says why."""


def read_checkpoint(path: Path, upgrade: bool = True) -> dict:
    """A fairseq checkpoint, read weights-only (argparse-style ones included): as fairseq
    reads it (``load_checkpoint_to_cpu``: settings upgraded to a config), or, without
    ``upgrade``, as stored (by torch alone, which spares importing fairseq).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: it is empty, truncated, not a torch file, holds objects that
            weights-only loading refuses (which are never run), or is not fairseq's.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint: {path} does not exist")
    allow_argparse_checkpoints()
    try:
        if upgrade:
            from fairseq import checkpoint_utils

            state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch's and fairseq's errors alike: the file is the problem
        raise CheckpointError(f"checkpoint: {path} {_why_unreadable(path, err)}") from None
    if not isinstance(state, dict) or "model" not in state or model_config(state) is None:
        raise CheckpointError(f"checkpoint: {path} is not a fairseq checkpoint (no model weights and settings)")
    return state


def _why_unreadable(path: Path, err: Exception) -> str:
    """Why fairseq's loader failed on ``path`` with ``err``: the file, read once more by
    torch alone (weights-only, so nothing in it runs), or else its layout."""
    if path.stat().st_size == 0:
        return "is empty"
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=False)
    except pickle.UnpicklingError as load_err:
        refused = re.search(r"GLOBAL (\S+)", str(load_err))
        if "Weights only load failed" in str(load_err):
            what = refused[1] if refused else "an object"
            return f"holds {what}, which weights-only loading refuses; nothing in it was run"
        return f"is not a torch checkpoint ({_first_line(load_err)})"
    except (RuntimeError, EOFError, OSError) as load_err:
        return f"is truncated or corrupt ({_first_line(load_err)})"
    except Exception as load_err:
        return f"is not a torch checkpoint ({_first_line(load_err)})"
    return f"is not a fairseq checkpoint ({_first_line(err)})"


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
