"""Turn a fairseq RoBERTa checkpoint into a ``longformer_roberta`` one (paper §5).

Three changes, and nothing else, so that the converted model with a window as wide as
the input computes exactly what RoBERTa did:

- the learned position table grows to ``max_positions`` rows by copying RoBERTa's
  rows over and over (or, for the paper's ablation, random rows). fairseq's first
  ``padding_idx + 1`` rows are reserved (position ids start at ``padding_idx + 1``)
  and are kept as they are;
- each layer gains ``q/k/v_proj_global``, copies of its ``q/k/v_proj``;
- the model config names ``longformer_roberta`` with the chosen window.

:func:`to_longformer` makes the changes on a :class:`~.released.ReleasedModel`;
:func:`convert_roberta` is ``longformer-fs convert-roberta``: read (:mod:`.readers`), change,
write.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..conventions import NUM_SPECIALS
from ..fairseq_format import config_set
from ..models import longformer_roberta as layout
from ..models.weight_layout import add_global_projections
from ..modules.per_layer import layer_values
from .readers import read_release
from .released import NotConvertibleError, ReleasedModel

COMMAND = "convert-roberta"
# The HF model types convert-roberta reads (an HF Longformer, too: its positions and window change).
HF_TYPES = ("roberta", "xlm-roberta", "camembert", "longformer")


class NotRobertaError(NotConvertibleError):
    """The checkpoint is not a fairseq RoBERTa-like encoder."""


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


def add_tokens(weights: dict, dictionary_lines: list[str], symbols: list[str], seed: int = 0) -> tuple[list[str], dict]:
    """New dictionary symbols with random embedding rows (WikiHop's ``[q] [/q] [ent] [/ent]``).

    The symbols missing from the dictionary are appended to it, and rows for them are
    inserted where their ids fall: after the dictionary's rows, before a ``<mask>`` row
    that a masked-LM checkpoint has at the end. Existing rows keep their values and ids.

    Returns:
        The new ``dict.txt`` lines, and ``{symbol: id}`` of the added symbols.
    """
    present = {line.rsplit(" ", 1)[0] for line in dictionary_lines}
    new = [s for s in dict.fromkeys(symbols) if s not in present]
    if not new:
        return dictionary_lines, {}
    embed = weights[layout.TOKEN_EMBEDDINGS]
    first = NUM_SPECIALS + len(dictionary_lines)
    if embed.shape[0] not in (first, first + 1):
        raise NotRobertaError(
            f"checkpoint: {embed.shape[0]} embedding rows for a {first}-symbol dictionary; is dict.txt the model's?"
        )
    gen = torch.Generator().manual_seed(seed)
    rows = (torch.randn(len(new), embed.shape[1], generator=gen, dtype=torch.float64) * 0.02).to(embed)
    for key in (layout.TOKEN_EMBEDDINGS, layout.LM_HEAD + "weight"):  # tied, stored under both names
        if key in weights:
            weights[key] = torch.cat([weights[key][:first], rows, weights[key][first:]])
    bias = layout.LM_HEAD + "bias"
    if bias in weights:
        weights[bias] = torch.cat([weights[bias][:first], weights[bias].new_zeros(len(new)), weights[bias][first:]])
    return dictionary_lines + [f"{s} 1" for s in new], {s: first + i for i, s in enumerate(new)}


def to_longformer(
    model: ReleasedModel,
    max_positions: int = 4096,
    window: str = "256",
    position_init: str = "copy",
    seed: int = 0,
    extra_tokens: list[str] | None = None,
) -> dict:
    """A RoBERTa-like ``model`` made a ``longformer_roberta`` one, in place; returns what changed."""
    layers = check_roberta_like(model.weights, model.name)
    layer_values(window, layers, "window")  # a bad per-layer list fails here, not at training time
    source_model = model.name
    positions = model.extend_positions(max_positions, position_init, seed)
    added = add_global_projections(model.weights, layout.LAYERS)
    model.dictionary, new_tokens = add_tokens(model.weights, model.dictionary, extra_tokens or [], seed)
    large = model.weights[layout.POSITIONS].shape[1] >= 1024
    arch = "longformer_roberta_large" if large else "longformer_roberta_base"
    config_set(model.model_cfg, _name=arch, arch=arch, attention_window=str(window), attention_dilation="1",
               causal_attention=False, global_attention_tokens="")  # fmt: skip
    return {
        "source_model": source_model,
        "arch": arch,
        "layers": layers,
        "positions": positions,
        "position_init": position_init,
        "global_projection_tensors": added,
        "window": str(window),
        "added_tokens": new_tokens,
    }


def convert_roberta(src: Path, out_dir: Path, max_positions: int = 4096, window: str = "256",
                    position_init: str = "copy", seed: int = 0, extra_tokens: list[str] | None = None,
                    force: bool = False) -> dict:  # fmt: skip
    """``longformer-fs convert-roberta``: ``src`` (a ``model.pt``, the directory holding it
    and ``dict.txt``, or an HF directory) as ``out_dir/model.pt`` + ``dict.txt``; the report."""
    model = read_release(src, HF_TYPES, COMMAND)
    changes = to_longformer(model, max_positions, window, position_init, seed, extra_tokens)
    report = {"source": str(model.source), "output": str(Path(out_dir) / "model.pt"), **changes}
    model.write(out_dir, COMMAND, report, force)
    return report
