"""``led``: the Longformer-Encoder-Decoder (paper v2 §7), fairseq's BART for long inputs.

- The encoder is BART's with Longformer self-attention in every layer: a window per
  layer (``--attention-window``, default 512 per side: the paper's 1,024) and global
  attention on the first ``<s>`` of each source.
- The decoder is BART's, unchanged: full causal self-attention, full cross-attention to
  every encoder state, incremental decoding and beam search through fairseq-generate.
- Sources get 16,384 positions (``longformer-fs convert-bart`` copies BART's 1,024
  learned rows out to them), targets keep BART's 1,024.

Everything else is fairseq's BART, so LED works with the ``translation`` task,
``label_smoothed_cross_entropy``, ``fairseq-train``, ``fairseq-hydra-train`` and
``fairseq-generate``. The model takes argparse-style settings like BART
(``--arch led_base``, or ``model._name: led_base`` under Hydra).
"""

from __future__ import annotations

import argparse
import logging
import re

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart.model import BARTModel, bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from ..attention.tracing import constant_when_traced
from ..modules.compiled import allow_graphs, compiled_in_training
from .longformer_encoder import LongformerTransformerEncoder, add_compile_layers_arg, add_max_global_tokens_arg
from .pretrained import FromPretrained
from .weight_layout import add_global_projections, check_learned_positions

logger = logging.getLogger(__name__)

DEFAULT_WINDOW = 512  # one side: the paper's 1,024-token window
DEFAULT_MAX_SOURCE_POSITIONS = 16384
DEFAULT_MAX_TARGET_POSITIONS = 1024
GLOBAL_TOKEN = "<s>"  # each source's first <s>

# The state-dict layout (fairseq BART's keys, which this model keeps).
ENCODER_LAYERS = "encoder.layers."
DECODER_LAYERS = "decoder.layers."
TOKEN_EMBEDDINGS = "encoder.embed_tokens.weight"
ENCODER_POSITIONS = "encoder.embed_positions.weight"
DECODER_POSITIONS = "decoder.embed_positions.weight"
_ENCODER_QUERY = re.compile(r"^" + re.escape(ENCODER_LAYERS) + r"(\d+)\.self_attn\.q_proj\.weight$")
_DECODER_CROSS = re.compile(r"^" + re.escape(DECODER_LAYERS) + r"(\d+)\.encoder_attn\.q_proj\.weight$")


def encoder_layers(state_dict: dict) -> int:
    return len({m.group(1) for k in state_dict if (m := _ENCODER_QUERY.match(k))})


def decoder_layers(state_dict: dict) -> int:
    """Decoder layers with cross-attention (a BART-style decoder)."""
    return len({m.group(1) for k in state_dict if (m := _DECODER_CROSS.match(k))})


class LEDEncoder(LongformerTransformerEncoder):
    """BART's encoder with Longformer self-attention; the first ``<s>`` of a source is global."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens, first_only=True)


class _SharedTraceAttention(MultiheadAttention):
    """fairseq's attention, whose incremental-state key a trace takes as a constant.

    The key names the layer (a random id per module), and fairseq computes it in every
    forward, in training too, where no incremental state exists; a compiled layer would
    guard on it, one graph per layer. Taken as a constant it is not guarded, so the
    decoder's layers share their graph. Only compiled training traces it, and it never has
    an incremental state; generation runs eagerly, where nothing changes.
    """

    @constant_when_traced
    def _get_full_incremental_state_key(self, key: str) -> str:
        return super()._get_full_incremental_state_key(key)


def _shared_trace(attention: MultiheadAttention) -> MultiheadAttention:
    if type(attention) is MultiheadAttention:
        attention.__class__ = _SharedTraceAttention
    return attention


class LEDDecoderLayer(TransformerDecoderLayerBase):
    """BART's decoder layer, compiled in training with ``--compile-layers``; its layers then
    share one graph (the last has its own: fairseq returns its attention weights)."""

    forward = compiled_in_training(TransformerDecoderLayerBase.forward)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return _shared_trace(super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn))

    def build_encoder_attention(self, embed_dim, cfg):
        return _shared_trace(super().build_encoder_attention(embed_dim, cfg))


class LEDDecoder(TransformerDecoderBase):
    """BART's decoder, unchanged in what it computes.

    - It takes its targets' padding mask as it is. fairseq's decoder asks the device
      whether the targets hold padding (``.any()``: the host waits every step) unless
      ``cross_self_attention`` is set, and then passes the mask. Only that check reads the
      decoder's flag; each layer keeps its own, built from the model's settings.
    - Its layers are :class:`LEDDecoderLayer`, wrapped as fairseq wraps its own
      (activation checkpointing, FSDP).
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn: bool, compile_layers: bool):
        self.compile_layers = compile_layers  # read by build_decoder_layer, inside the base __init__
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.cross_self_attention = True
        if compile_layers:
            allow_graphs(2)  # the layers, and the last, which returns its attention

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = LEDDecoderLayer(cfg, no_encoder_attn)
        layer.compile_layers = self.compile_layers
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        # FSDP wraps a checkpointed layer whatever its size, as fairseq's decoder does.
        return fsdp_wrap(layer, min_num_params=0 if cfg.checkpoint_activations else cfg.min_params_to_wrap)


@register_model("led")
class LEDModel(FromPretrained, BARTModel):
    """BART with a Longformer encoder for long sources."""

    @staticmethod
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument("--attention-window", type=str, metavar="W",
                            help="one-sided encoder window per layer: 'w' for all layers or 'w0,w1,...' "
                                 f"(default {DEFAULT_WINDOW}, the paper's 1,024-token window)")  # fmt: skip
        add_max_global_tokens_arg(parser)
        add_compile_layers_arg(parser)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            # fairseq's Transformer builders copy settings they do not know only from a
            # namespace; a Hydra config would lose the window on the way to the encoder.
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        if safe_getattr(args, "task", None) is None:
            # BART's upgrade_state_dict_named reads args.task, which a Hydra model config lacks.
            args.task = safe_getattr(task.cfg, "_name", None) if hasattr(task, "cfg") else None
        led_base_architecture(args)
        model = super().build_model(args, task)
        model.encoder.init_global_projections(trainable=True)  # after BART's own initialisation
        return model

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        compile_layers = bool(safe_getattr(args, "compile_layers", False))
        return LEDDecoder(cfg, tgt_dict, embed_tokens, cfg.no_cross_attention, compile_layers)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        encoder = LEDEncoder(args, src_dict, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name else ""
        # A plain BART state dict lacks the global projections: start them as copies.
        added = add_global_projections(state_dict, prefix + ENCODER_LAYERS)
        if added:
            logger.info("initialised %d global projections from the local ones", added)
        check_learned_positions(
            state_dict,
            prefix + ENCODER_POSITIONS,
            self.encoder.embed_positions,
            self.encoder.padding_idx,
            "source positions",
            "convert-bart --max-source-positions",
        )
        super().upgrade_state_dict_named(state_dict, name)


def _defaults(args) -> None:
    # safe_getattr keeps a None that argparse left, hence the explicit checks.
    if safe_getattr(args, "attention_window", None) is None:
        args.attention_window = str(DEFAULT_WINDOW)
    args.attention_dilation = "1"
    args.causal_attention = False
    args.global_attention_tokens = GLOBAL_TOKEN
    if safe_getattr(args, "max_source_positions", None) is None:
        args.max_source_positions = DEFAULT_MAX_SOURCE_POSITIONS
    if safe_getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = DEFAULT_MAX_TARGET_POSITIONS


@register_model_architecture("led", "led")
def led_architecture(args):
    led_base_architecture(args)


@register_model_architecture("led", "led_base")
def led_base_architecture(args):
    """BART-base (6 + 6 layers, width 768) with a Longformer encoder."""
    _defaults(args)
    bart_base_architecture(args)


@register_model_architecture("led", "led_large")
def led_large_architecture(args):
    """BART-large (12 + 12 layers, width 1024) with a Longformer encoder."""
    _defaults(args)
    bart_large_architecture(args)
