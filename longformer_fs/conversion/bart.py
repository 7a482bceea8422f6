"""Turn a fairseq BART checkpoint into an ``led`` one (paper v2 §7: no extra pretraining).

Three changes, and nothing else, so that the converted model with a window as wide as
the source computes exactly what BART did:

- the encoder's learned position table grows to ``max_source_positions`` rows by copying
  BART's rows over and over (16 copies of 1,024 for 16K). fairseq's first
  ``padding_idx + 1`` rows are reserved and kept; the decoder's table is untouched;
- each encoder layer gains ``q/k/v_proj_global``, copies of its ``q/k/v_proj``;
- the model config names ``led_base`` or ``led_large`` with the chosen window.

:func:`to_led` makes the changes on a :class:`~.released.ReleasedModel`; :func:`convert_bart`
is ``longformer-fs convert-bart``: read (:mod:`.readers`), change, write.
"""

from __future__ import annotations

from pathlib import Path

from ..fairseq_format import config_get, config_set
from ..models import led as layout
from ..models.weight_layout import add_global_projections
from ..modules.per_layer import layer_values
from .readers import read_release
from .released import NotConvertibleError, ReleasedModel

COMMAND = "convert-bart"
HF_TYPES = ("bart", "led")  # an HF LED too: its positions and window change


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


def to_led(model: ReleasedModel, max_source_positions: int = 16384, window: str = "512") -> dict:
    """A BART-like ``model`` made an ``led`` one, in place; returns what changed."""
    layers = check_bart_like(model.weights, model.name)
    layer_values(window, layers[0], "window")  # a bad per-layer list fails here, not at training time
    source_model = model.name
    positions = model.extend_positions(max_source_positions)
    added = add_global_projections(model.weights, layout.ENCODER_LAYERS)
    large = model.weights[layout.TOKEN_EMBEDDINGS].shape[1] >= 1024
    arch = "led_large" if large else "led_base"
    target_positions = config_get(model.model_cfg, "max_target_positions", layout.DEFAULT_MAX_TARGET_POSITIONS)
    config_set(model.model_cfg, _name=arch, arch=arch, max_target_positions=target_positions,
               attention_window=str(window))  # fmt: skip
    return {
        "source_model": source_model,
        "arch": arch,
        "layers": list(layers),
        "source_positions": positions,
        "target_positions": target_positions,
        "global_projection_tensors": added,
        "window": str(window),
    }


def convert_bart(src: Path, out_dir: Path, max_source_positions: int = 16384, window: str = "512",
                 force: bool = False) -> dict:  # fmt: skip
    """``longformer-fs convert-bart``: ``src`` (a ``model.pt``, the directory holding it and
    ``dict.txt``, or an HF directory) as ``out_dir/model.pt`` + ``dict.txt``; the report."""
    model = read_release(src, HF_TYPES, COMMAND)
    changes = to_led(model, max_source_positions, window)
    report = {"source": str(model.source), "output": str(Path(out_dir) / "model.pt"), **changes}
    model.write(out_dir, COMMAND, report, force)
    return report
