"""An ``led`` checkpoint as HF transformers' ``LEDForConditionalGeneration``.

The same network under other names. Two differences in layout: HF's LED numbers
positions from 0 with no reserved rows, where fairseq (like BART) keeps
``padding_idx + 1`` reserved rows before the first learned one, so both position tables
lose those rows; and HF's ``attention_window`` is the total, ``2w``. The global token is
the caller's: pass ``global_attention_mask`` with the first ``<s>`` set, as LED does.
"""

from __future__ import annotations

import torch
from transformers import LEDConfig, LEDForConditionalGeneration

from ..checkpoint import Checkpoint
from ..conventions import BOS, EOS, PAD
from ..fairseq_format import config_get
from ..hf_format import weight_names
from ..models import led as layout
from ..models.weight_layout import reserved_position_rows
from ..modules.per_layer import layer_values
from .errors import ExportError


def led_windows(args, layers: int) -> list[int]:
    windows = layer_values(config_get(args, "attention_window", str(layout.DEFAULT_WINDOW)), layers, "attention window")
    if min(windows) < 1:
        raise ExportError("checkpoint: HF LED needs a window of at least 1 on each side")
    return list(windows)


def led_state_dict(state: dict, encoder_layers: int, decoder_layers: int) -> dict:
    """fairseq ``led`` weights under HF ``LEDForConditionalGeneration`` names."""
    reserved = reserved_position_rows(PAD)
    tokens = state[layout.TOKEN_EMBEDDINGS]
    out = {
        hf: state[fs] for fs, hf in weight_names.encoder_decoder(encoder_layers, decoder_layers, "led.", True).items()
    }
    out |= {
        "led." + weight_names.SHARED_EMBEDDINGS: tokens,
        "led.encoder.embed_tokens.weight": tokens,
        "led.decoder.embed_tokens.weight": tokens,
        weight_names.LM_HEAD_WEIGHT: state.get("decoder.output_projection.weight", tokens),
        weight_names.FINAL_LOGITS_BIAS: torch.zeros(1, tokens.shape[0]),
        "led.encoder.embed_positions.weight": state[layout.ENCODER_POSITIONS][reserved:],
        "led.decoder.embed_positions.weight": state[layout.DECODER_POSITIONS][reserved:],
    }
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def led_config(args, state: dict, windows: list[int], decoder_layers: int) -> LEDConfig:
    reserved = reserved_position_rows(PAD)
    vocab, hidden = state[layout.TOKEN_EMBEDDINGS].shape
    get = lambda key, default=None: config_get(args, key, default)  # noqa: E731
    return LEDConfig(
        vocab_size=vocab,
        d_model=hidden,
        encoder_layers=len(windows),
        decoder_layers=decoder_layers,
        encoder_attention_heads=get("encoder_attention_heads"),
        decoder_attention_heads=get("decoder_attention_heads"),
        encoder_ffn_dim=get("encoder_ffn_embed_dim"),
        decoder_ffn_dim=get("decoder_ffn_embed_dim"),
        activation_function=get("activation_fn", "gelu"),
        dropout=get("dropout", 0.1),
        attention_dropout=get("attention_dropout", 0.0),
        activation_dropout=get("activation_dropout", 0.0),
        max_encoder_position_embeddings=state[layout.ENCODER_POSITIONS].shape[0] - reserved,
        max_decoder_position_embeddings=state[layout.DECODER_POSITIONS].shape[0] - reserved,
        attention_window=[2 * w for w in windows],  # HF counts both sides
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=EOS,  # fairseq's decoder starts from </s>
    )


def export_led(checkpoint: Checkpoint):
    """An ``led`` checkpoint (read, or :meth:`~.Checkpoint.in_memory`) as HF's LED: the
    model and a report, or a ValueError for what HF's LED cannot run."""
    args, weights = checkpoint.model_cfg, checkpoint.state["model"]
    encoder, decoder = layout.encoder_layers(weights), layout.decoder_layers(weights)
    if config_get(args, "encoder_normalize_before", False) or config_get(args, "decoder_normalize_before", False):
        raise ExportError("checkpoint: pre-layernorm layers differ from HF LED's (BART's) layers; export refused")
    windows = led_windows(args, encoder)
    model = LEDForConditionalGeneration(led_config(args, weights, windows, decoder))
    missing, unexpected = model.load_state_dict(led_state_dict(weights, encoder, decoder), strict=False)
    if unexpected or missing:
        raise ExportError(f"checkpoint: weights do not map onto HF LED (missing {missing}, unexpected {unexpected})")
    report = {
        "layers": [encoder, decoder],
        "attention_window_hf": [2 * w for w in windows],
        "vocab": weights[layout.TOKEN_EMBEDDINGS].shape[0],
        "model_class": "LEDForConditionalGeneration",
    }
    return model, report
