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

from pathlib import Path

import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary

from ..models import longformer_roberta as layout
from ..models.checkpoints import (
    add_global_projections,
    config_set,
    model_config,
    model_name,
    reserved_position_rows,
    save_start_checkpoint,
)
from ..modules.per_layer import layer_values


class NotRobertaError(ValueError):
    """The checkpoint is not a fairseq RoBERTa-like encoder."""


def extend_positions(
    weight: torch.Tensor, max_positions: int, padding_idx: int, init: str = "copy", seed: int = 0
) -> torch.Tensor:
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
    reserved = reserved_position_rows(padding_idx)
    learned = weight[reserved:]
    if max_positions < learned.shape[0]:
        raise ValueError(
            f"max_positions: {max_positions} is smaller than the checkpoint's {learned.shape[0]}; "
            "Longformer extends the position table, it never cuts it"
        )
    if init == "copy":
        repeats = -(-max_positions // learned.shape[0])
        rows = learned.repeat(repeats, 1)[:max_positions]
    elif init == "random":
        gen = torch.Generator().manual_seed(seed)
        rows = (torch.randn(max_positions, weight.shape[1], generator=gen, dtype=torch.float64) * 0.02).to(weight)
    else:
        raise ValueError(f"position_init: expected 'copy' or 'random', got {init!r}")
    return torch.cat([weight[:reserved], rows])


def check_roberta_like(state_dict: dict, name: str | None) -> int:
    """Raise :class:`NotRobertaError` unless this is a RoBERTa-like encoder; returns its layer count."""
    problems = []
    if layout.POSITIONS not in state_dict:
        problems.append(f"no learned position table ({layout.POSITIONS})")
    if layout.LM_HEAD + "dense.weight" not in state_dict:
        problems.append(f"no masked-LM head ({layout.LM_HEAD.rstrip('.')})")
    layers = layout.encoder_layers(state_dict)
    if not layers:
        problems.append(f"no encoder self-attention layers ({layout.LAYERS}N.self_attn)")
    if problems:
        found = f" (model: {name})" if name else ""
        raise NotRobertaError("checkpoint: not a fairseq RoBERTa-like encoder" + found + ": " + "; ".join(problems))
    return layers


def convert_roberta(
    src: Path, out_dir: Path, max_positions: int = 4096, window: str = "256", position_init: str = "copy", seed: int = 0
) -> dict:
    """Convert ``src`` (a ``model.pt``, or a directory holding it and ``dict.txt``) into
    ``out_dir/model.pt`` + ``out_dir/dict.txt``. Returns a report of what changed."""
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
    source_model = model_name(model_cfg)
    weights = state["model"]
    layers = check_roberta_like(weights, source_model)
    layer_values(window, layers, "window")  # a bad per-layer list fails here, not at training time

    padding_idx = Dictionary.load(str(dictionary)).pad()
    old_positions = weights[layout.POSITIONS].shape[0] - reserved_position_rows(padding_idx)
    weights[layout.POSITIONS] = extend_positions(
        weights[layout.POSITIONS], max_positions, padding_idx, position_init, seed
    )
    added = add_global_projections(weights, layout.LAYERS)

    large = weights[layout.POSITIONS].shape[1] >= 1024
    arch = "longformer_roberta_large" if large else "longformer_roberta_base"
    config_set(
        model_cfg,
        _name=arch,
        arch=arch,
        max_positions=max_positions,
        max_source_positions=max_positions,
        attention_window=str(window),
        attention_dilation="1",
        causal_attention=False,
        global_attention_tokens="",
    )
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        config_set(cfg["task"], tokens_per_sample=max_positions)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_start_checkpoint(state, weights, out_dir / "model.pt")
    (out_dir / "dict.txt").write_bytes(dictionary.read_bytes())
    return {
        "source": str(ckpt),
        "output": str(out_dir / "model.pt"),
        "source_model": source_model,
        "arch": arch,
        "layers": layers,
        "positions": [old_positions, max_positions],
        "position_init": position_init,
        "global_projection_tensors": added,
        "window": str(window),
    }
