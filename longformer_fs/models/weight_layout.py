"""How the weights of our models are laid out, shared by every model here.

The model modules own their state-dict layout; the converters in
:mod:`longformer_fs.conversion` read it from them, never the other way round. This
module holds what all of them share:

- the global projections that Longformer attention adds next to fairseq's ``q/k/v_proj``,
  and :func:`add_global_projections`, which starts them as copies of the local ones (the
  paper's initialisation) wherever a state dict lacks them;
- fairseq's learned positions, whose first ``padding_idx + 1`` rows are reserved
  (:func:`reserved_position_rows`, :func:`check_learned_positions`).

Checkpoint files themselves (reading, settings, writing) are
:mod:`longformer_fs.fairseq_format`'.
"""

from __future__ import annotations

import re

import torch

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
