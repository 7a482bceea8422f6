"""Turn a fairseq RoBERTa checkpoint into a ``longformer_roberta`` one (paper §5).

Three changes, and nothing else, so that the converted model with a window as wide as
the input computes exactly what RoBERTa did:

- the learned position table grows to ``max_positions`` rows by copying RoBERTa's
  rows over and over (or, for the paper's ablation, random rows). fairseq's first
  ``padding_idx + 1`` rows are reserved (position ids start at ``padding_idx + 1``)
  and are kept as they are;
- each layer gains ``q/k/v_proj_global``, copies of its ``q/k/v_proj``;
- the model config names ``longformer_roberta`` with the chosen window.

Plain functions over state dicts; ``longformer-fs convert-roberta`` is the command.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from ..modules.per_layer import layer_values

POSITIONS_KEY = "embed_positions.weight"
SENTENCE_ENCODER = "encoder.sentence_encoder."
GLOBAL_PROJECTIONS = (("q_proj", "q_proj_global"), ("k_proj", "k_proj_global"), ("v_proj", "v_proj_global"))
_LAYER_QUERY = re.compile(r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn\.q_proj\.weight$")
_LOCAL_PROJECTION = re.compile(r"^(?P<layer>.*\.self_attn\.)(?P<proj>[qkv]_proj)\.(?P<param>weight|bias)$")


class NotRobertaError(ValueError):
    """The checkpoint is not a fairseq RoBERTa-like encoder."""


def add_global_projections(state_dict: dict, prefix: str = "") -> int:
    """Add ``*_proj_global`` copies of every layer's local q/k/v where missing; returns how many tensors."""
    added = 0
    for key in list(state_dict):
        match = _LOCAL_PROJECTION.match(key)
        if not match or not key.startswith(prefix):
            continue
        target = f"{match['layer']}{match['proj']}_global.{match['param']}"
        if target not in state_dict:
            state_dict[target] = state_dict[key].clone()
            added += 1
    return added


def extend_positions(weight: torch.Tensor, max_positions: int, padding_idx: int, init: str = "copy",
                     seed: int = 0) -> torch.Tensor:
    """A learned position table for ``max_positions`` positions.

    Args:
        weight: ``(padding_idx + 1 + P, C)``, fairseq's table for ``P`` positions.
        max_positions: new ``P' >= P``.
        padding_idx: the dictionary's padding index (1 for RoBERTa).
        init: ``"copy"`` tiles the ``P`` learned rows; ``"random"`` draws
            ``N(0, 0.02^2)`` rows (BERT's initialisation) for every position.

    Returns:
        ``(padding_idx + 1 + P', C)``; the reserved first rows are unchanged.
    """
    reserved = padding_idx + 1
    learned = weight[reserved:]
    if max_positions < learned.shape[0]:
        raise ValueError(f"max_positions: {max_positions} is smaller than the checkpoint's {learned.shape[0]}; "
                         "Longformer extends the position table, it never cuts it")
    if init == "copy":
        repeats = -(-max_positions // learned.shape[0])
        rows = learned.repeat(repeats, 1)[:max_positions]
    elif init == "random":
        gen = torch.Generator().manual_seed(seed)
        rows = (torch.randn(max_positions, weight.shape[1], generator=gen, dtype=torch.float64) * 0.02).to(weight)
    else:
        raise ValueError(f"position_init: expected 'copy' or 'random', got {init!r}")
    return torch.cat([weight[:reserved], rows])


def check_roberta_like(state_dict: dict, model_name: str | None) -> int:
    """Raise :class:`NotRobertaError` unless this is a RoBERTa-like encoder; returns its layer count."""
    problems = []
    if SENTENCE_ENCODER + POSITIONS_KEY not in state_dict:
        problems.append(f"no learned position table ({SENTENCE_ENCODER + POSITIONS_KEY})")
    if "encoder.lm_head.dense.weight" not in state_dict:
        problems.append("no masked-LM head (encoder.lm_head)")
    layers = encoder_layers(state_dict)
    if not layers:
        problems.append("no encoder self-attention layers (encoder.sentence_encoder.layers.N.self_attn)")
    if problems:
        found = f" (model: {model_name})" if model_name else ""
        raise NotRobertaError("checkpoint: not a fairseq RoBERTa-like encoder" + found + ": " + "; ".join(problems))
    return layers


def encoder_layers(state_dict: dict) -> int:
    """How many encoder layers (with self-attention) a RoBERTa-style state dict holds."""
    return len({m.group(1) for k in state_dict if (m := _LAYER_QUERY.match(k))})


def model_config(state: dict):
    """The checkpoint's model settings: an argparse.Namespace (old RoBERTa) or a DictConfig."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        return cfg["model"]
    return state.get("args")


def _get(model_cfg, key, default=None):
    value = getattr(model_cfg, key, None) if isinstance(model_cfg, argparse.Namespace) else model_cfg.get(key)
    return default if value is None else value


def _set(model_cfg, **values) -> None:
    from omegaconf import open_dict

    if isinstance(model_cfg, argparse.Namespace):
        for key, value in values.items():
            setattr(model_cfg, key, value)
        return
    with open_dict(model_cfg):
        for key, value in values.items():
            model_cfg[key] = value


def convert_roberta(src: Path, out_dir: Path, max_positions: int = 4096, window: str = "256",
                    position_init: str = "copy", seed: int = 0) -> dict:
    """Convert ``src`` (a ``model.pt``, or a directory holding it and ``dict.txt``) into
    ``out_dir/model.pt`` + ``out_dir/dict.txt``. Returns a report of what changed."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    src = Path(src)
    ckpt = src / "model.pt" if src.is_dir() else src
    dictionary = ckpt.parent / "dict.txt"
    for path, what in ((ckpt, "checkpoint"), (dictionary, "dictionary (dict.txt next to the checkpoint)")):
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path} does not exist")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))
    except Exception as err:  # pickle, zip or torch errors: report the file, not the stack
        raise NotRobertaError(f"checkpoint: {ckpt} could not be read as a fairseq checkpoint ({err})") from None
    model_cfg = model_config(state)
    if model_cfg is None or "model" not in state:
        raise NotRobertaError(f"checkpoint: {ckpt} has no model config and weights; is it a fairseq checkpoint?")
    model_name = _get(model_cfg, "_name") or _get(model_cfg, "arch")
    weights = state["model"]
    layers = check_roberta_like(weights, model_name)
    layer_values(window, layers, "window")  # a bad per-layer list fails here, not at training time

    padding_idx = 1  # fairseq dictionaries: <s>=0, <pad>=1
    key = SENTENCE_ENCODER + POSITIONS_KEY
    old_rows = weights[key].shape[0]
    weights[key] = extend_positions(weights[key], max_positions, padding_idx, position_init, seed)
    added = add_global_projections(weights)

    large = weights[key].shape[1] >= 1024
    arch = "longformer_roberta_large" if large else "longformer_roberta_base"
    _set(model_cfg, _name=arch, arch=arch, max_positions=max_positions, max_source_positions=max_positions,
         attention_window=str(window), attention_dilation="1", causal_attention=False, global_attention_tokens="")
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        _set(cfg["task"], tokens_per_sample=max_positions)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    converted = {
        "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) if cfg is not None else None,
        "args": None if cfg is not None else model_cfg,
        "model": weights,
        # A fresh start: no optimizer state, update 0, no data-loader position (fairseq
        # reads the last history entry, so there is one).
        "optimizer_history": [{"criterion_name": "converted", "optimizer_name": "none",
                               "lr_scheduler_state": {}, "num_updates": 0}],
        "last_optimizer_state": None,
        "extra_state": {"train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0, "shuffle": True},
                        "val_loss": None},
    }
    tmp = out_dir / "model.pt.tmp"
    torch.save(converted, tmp)
    tmp.replace(out_dir / "model.pt")
    (out_dir / "dict.txt").write_bytes(dictionary.read_bytes())
    return {
        "source": str(ckpt),
        "output": str(out_dir / "model.pt"),
        "source_model": model_name,
        "arch": arch,
        "layers": layers,
        "positions": [old_rows - padding_idx - 1, max_positions],
        "position_init": position_init,
        "global_projection_tensors": added,
        "window": str(window),
    }
