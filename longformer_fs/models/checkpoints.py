"""How fairseq checkpoints of our models are laid out, shared by every model here.

The model modules own their state-dict layout; the converters in
:mod:`longformer_fs.conversion` read it from them, never the other way round. This
module holds what all of them share:

- the global projections that Longformer attention adds next to fairseq's ``q/k/v_proj``,
  and :func:`add_global_projections`, which starts them as copies of the local ones (the
  paper's initialisation) wherever a state dict lacks them;
- fairseq's learned positions, whose first ``padding_idx + 1`` rows are reserved
  (:func:`reserved_position_rows`);
- a checkpoint's model settings, stored as an ``argparse.Namespace`` by pre-Hydra
  fairseq (the released RoBERTa and BART) and as a DictConfig since
  (:func:`model_config`, :func:`config_get`, :func:`config_set`);
- :func:`save_start_checkpoint`: a checkpoint that ``fairseq-train`` starts from with a
  fresh optimizer, as converters write; :func:`read_checkpoint` and
  :func:`allow_argparse_checkpoints`: reading checkpoints whose settings are an
  ``argparse.Namespace``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

# (local, global) projection names inside one Longformer attention module.
GLOBAL_PROJECTIONS = (("q_proj", "q_proj_global"), ("k_proj", "k_proj_global"), ("v_proj", "v_proj_global"))
_LOCAL_PROJECTION = re.compile(r"^(?P<attention>.*\.self_attn\.)(?P<proj>[qkv]_proj)\.(?P<param>weight|bias)$")


def add_global_projections(state_dict: dict, layers_prefix: str) -> int:
    """Add ``*_proj_global`` copies of the local q/k/v of every self-attention under
    ``layers_prefix`` (e.g. ``"encoder.sentence_encoder.layers."``) that lacks them.

    The prefix keeps other attentions out: a BART decoder's self-attention is not
    Longformer attention. Returns how many tensors were added.
    """
    added = 0
    for key in list(state_dict):
        match = _LOCAL_PROJECTION.match(key)
        if not match or not key.startswith(layers_prefix):
            continue
        target = f"{match['attention']}{match['proj']}_global.{match['param']}"
        if target not in state_dict:
            state_dict[target] = state_dict[key].clone()
            added += 1
    return added


def copy_global_projections(attention: torch.nn.Module) -> None:
    """Set a freshly built attention's global projections to copies of its local ones."""
    for local, global_ in GLOBAL_PROJECTIONS:
        getattr(attention, global_).load_state_dict(getattr(attention, local).state_dict())


def reserved_position_rows(padding_idx: int) -> int:
    """Rows before the first learned position: fairseq numbers positions from
    ``padding_idx + 1`` (HF's RoBERTa does too; HF's BART/LED instead keep 2 rows
    for BART's offset and its LED has none)."""
    return padding_idx + 1


def check_learned_positions(state_dict: dict, key: str, embed_positions, padding_idx: int, what: str, convert: str):
    """A checkpoint's learned positions at ``key`` must number the model's.

    Args:
        embed_positions: the model's learned-position embedding.
        what: what the positions are called in the error ("positions", "source positions").
        convert: the conversion that gives a checkpoint N of them, less N
            ("convert-roberta --max-positions").

    Raises:
        ValueError: they differ; it names the conversion to run.
    """
    reserved = reserved_position_rows(padding_idx)
    expected = embed_positions.weight.shape[0] - reserved
    if key in state_dict and state_dict[key].shape[0] - reserved != expected:
        raise ValueError(
            f"{key}: the checkpoint has {state_dict[key].shape[0] - reserved} {what} but this model "
            f"{expected}; convert it first with `longformer-fs {convert} {expected}`"
        )


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
    next to ``path`` and renamed, so a crash never leaves half a checkpoint.
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
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, tmp)
    tmp.replace(path)


def allow_argparse_checkpoints() -> None:
    """Let ``torch.load`` read checkpoints that pickle an ``argparse.Namespace``.

    torch >= 2.6 loads with ``weights_only=True``, which refuses them, and they are common:
    fairseq's releases from before Hydra (RoBERTa's, BART's) and every checkpoint of an
    argparse-style model trained with command-line flags (ours are such models) keep their
    settings so. Called where checkpoints are loaded, and when the plugin registers with
    fairseq, whose commands then load them (:mod:`longformer_fs.components`).
    """
    torch.serialization.add_safe_globals([argparse.Namespace])


def read_checkpoint(path: Path) -> dict:
    """A fairseq checkpoint as fairseq reads it (``load_checkpoint_to_cpu``: settings
    upgraded to a config), argparse-style ones included."""
    from fairseq import checkpoint_utils

    allow_argparse_checkpoints()
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))
