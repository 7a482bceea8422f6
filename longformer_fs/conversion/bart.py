"""Turn a fairseq BART checkpoint into an ``led`` one (paper v2 §7: no extra pretraining).

Three changes, and nothing else, so that the converted model with a window as wide as
the source computes exactly what BART did:

- the encoder's learned position table grows to ``max_source_positions`` rows by copying
  BART's rows over and over (16 copies of 1,024 for 16K). fairseq's first
  ``padding_idx + 1`` rows are reserved and kept; the decoder's table is untouched;
- each encoder layer gains ``q/k/v_proj_global``, copies of its ``q/k/v_proj``;
- the model config names ``led_base`` or ``led_large`` with the chosen window.

``longformer-fs convert-bart`` is the command.
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoint_files import config_get, config_set
from ..conventions import PAD
from ..models import led as layout
from ..models.checkpoints import add_global_projections, reserved_position_rows
from ..modules.per_layer import layer_values
from .source import NotConvertibleError, extend_positions, read_source, write_converted


class NotBartError(NotConvertibleError):
    """The checkpoint is not a fairseq BART-like encoder-decoder."""


def check_bart_like(state_dict: dict, name: str | None) -> tuple[int, int]:
    """Raise :class:`NotBartError` unless this is a BART-like model; returns its layer counts."""
    problems = []
    if layout.ENCODER_POSITIONS not in state_dict:
        problems.append(f"no learned encoder positions ({layout.ENCODER_POSITIONS})")
    encoder, decoder = layout.encoder_layers(state_dict), layout.decoder_layers(state_dict)
    if not encoder:
        problems.append(f"no encoder self-attention layers ({layout.ENCODER_LAYERS}N.self_attn)")
    if not decoder:
        problems.append(f"no decoder layers with cross-attention ({layout.DECODER_LAYERS}N.encoder_attn)")
    if problems:
        found = f" (model: {name})" if name else ""
        raise NotBartError("checkpoint: not a fairseq BART-like encoder-decoder" + found + ": " + "; ".join(problems))
    return encoder, decoder


def convert_bart(src: Path, out_dir: Path, max_source_positions: int = 16384, window: str = "512") -> dict:
    """Convert ``src`` (a ``model.pt``, or a directory holding it and ``dict.txt``) into
    ``out_dir/model.pt`` + ``out_dir/dict.txt``. Returns a report of what changed."""
    source = read_source(src, hf_types=("bart", "led"))
    weights = source.weights
    layers = check_bart_like(weights, source.name)
    layer_values(window, layers[0], "window")  # a bad per-layer list fails here, not at training time

    old_positions = weights[layout.ENCODER_POSITIONS].shape[0] - reserved_position_rows(PAD)
    weights[layout.ENCODER_POSITIONS] = extend_positions(weights[layout.ENCODER_POSITIONS], max_source_positions, PAD)
    added = add_global_projections(weights, layout.ENCODER_LAYERS)

    large = weights[layout.TOKEN_EMBEDDINGS].shape[1] >= 1024
    arch = "led_large" if large else "led_base"
    target_positions = config_get(source.model_cfg, "max_target_positions", layout.DEFAULT_MAX_TARGET_POSITIONS)
    config_set(source.model_cfg, _name=arch, arch=arch, max_source_positions=max_source_positions,
               max_target_positions=target_positions, attention_window=str(window))  # fmt: skip
    model_pt = write_converted(source, weights, out_dir, source.dictionary, max_source_positions=max_source_positions)
    return {
        "source": str(source.path),
        "output": str(model_pt),
        "source_model": source.name,
        "arch": arch,
        "layers": list(layers),
        "source_positions": [old_positions, max_source_positions],
        "target_positions": target_positions,
        "global_projection_tensors": added,
        "window": str(window),
    }
