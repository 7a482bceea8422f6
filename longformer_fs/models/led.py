"""``led``: the Longformer-Encoder-Decoder (paper v2 §7), fairseq's BART for long inputs.

- The encoder is BART's with Longformer self-attention in every layer: a window per
  layer (``--attention-window``, default 512 per side: the paper's 1,024) and global
  attention on the first ``<s>`` of each source.
- The decoder is BART's, unchanged: full causal self-attention, full cross-attention to
  every encoder state, incremental decoding and beam search through fairseq-generate.
- Rows may pack several (source, target) pairs in training (``longformer_translation
  --pack``, issue #75): each source is then encoded alone (its band, its positions, its
  first ``<s>`` global), and each target decoded alone, causal within itself, numbered
  from its own start and attending only its own source's encoder states.
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

import torch
import torch.nn.functional as F
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart.model import BARTModel, bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import LearnedPositionalEmbedding, MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from ..attention.tracing import constant_when_traced
from ..modules.compiled import allow_graphs, compiled_in_training
from ..modules.packing import document_positions
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


class LEDDecoderAttention(MultiheadAttention):
    """fairseq's attention, whose incremental-state key a trace takes as a constant, and
    which attends packed rows through a mask of allowed pairs.

    - The key names the layer (a random id per module), and fairseq computes it in every
      forward, in training too, where no incremental state exists; a compiled layer would
      guard on it, one graph per layer. Taken as a constant it is not guarded, so the
      decoder's layers share their graph. Only compiled training traces it, and it never
      has an incremental state; generation runs eagerly, where nothing changes.
    - fairseq's layer hands its cross-attention only the keys' padding, one mask for
      every query, and fairseq's attention adds a mask of the same pairs for every row of
      the batch. Packed rows need a mask per row and query (:attr:`allowed`,
      :meth:`LEDDecoder.set_documents`); with one set, the attention is
      ``scaled_dot_product_attention`` over it, and returns no weights.
    """

    allowed: torch.Tensor | None = None  # (B, T, S) bool, the pairs a packed forward attends

    @constant_when_traced
    def _get_full_incremental_state_key(self, key: str) -> str:
        return super()._get_full_incremental_state_key(key)

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False):  # fmt: skip
        if self.allowed is None or incremental_state is not None:
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights, static_kv,
                                   attn_mask, before_softmax, need_head_weights)  # fmt: skip
        length, batch, width = query.shape  # (T, B, C); keys (S, B, C)

        def heads(x: torch.Tensor) -> torch.Tensor:  # (L, B, C) -> (B, H, L, D)
            return x.reshape(x.shape[0], batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        dropout = self.dropout_module.p if self.training or self.dropout_module.apply_during_inference else 0.0
        # fairseq scales the queries by head_dim ** -0.5 after the bias: the default scale here.
        x = F.scaled_dot_product_attention(
            heads(self.q_proj(query)), heads(self.k_proj(key)), heads(self.v_proj(value)),
            attn_mask=self.allowed[:, None], dropout_p=dropout,
        )  # fmt: skip
        return self.out_proj(x.permute(2, 0, 1, 3).reshape(length, batch, width)), None


class TargetPositions(LearnedPositionalEmbedding):
    """fairseq's learned positions, numbered from each target's start in packed rows
    (:attr:`packed`, ``(B, T)``, set by :class:`LEDDecoder` for a forward), and as fairseq
    numbers them otherwise. The weights and their keys are fairseq's."""

    packed: torch.Tensor | None = None

    def forward(self, input, incremental_state=None, positions=None):
        if self.packed is None or incremental_state is not None:
            return super().forward(input, incremental_state, positions)
        return F.embedding(self.packed, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)  # fmt: skip


def _shared_trace(attention: MultiheadAttention) -> MultiheadAttention:
    if type(attention) is MultiheadAttention:
        attention.__class__ = LEDDecoderAttention
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
    - In packed rows (:meth:`set_documents`) each target is decoded alone.
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn: bool, compile_layers: bool):
        self.compile_layers = compile_layers  # read by build_decoder_layer, inside the base __init__
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.cross_self_attention = True
        if compile_layers:
            allow_graphs(2)  # the layers, and the last, which returns its attention
        self._documents: tuple[torch.Tensor, torch.Tensor] | None = None
        if type(self.embed_positions) is LearnedPositionalEmbedding:
            self.embed_positions.__class__ = TargetPositions
        self._attentions = [m for m in self.modules() if isinstance(m, LEDDecoderAttention)]

    def set_documents(self, target_documents: torch.Tensor | None, source_documents: torch.Tensor | None) -> None:
        """The document ids of the next forward's packed rows, ``(B, T)`` of the targets and
        ``(B, S)`` of the sources, the ``i``-th target of a row being the ``i``-th source's;
        or None (one pair a row). For the next forward only."""
        if (target_documents is None) != (source_documents is None):
            raise ValueError("documents: packed rows need the ids of both the sources and the targets")
        both = None if target_documents is None else (target_documents, source_documents)
        self._documents = both

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        # Each forward sets the masks of its rows, or clears them: they stay on the layers
        # until then, for activation checkpointing's recomputation in the backward pass.
        documents, self._documents = self._documents, None
        allowed = self_allowed = positions = None
        if documents is not None and incremental_state is None:
            if not isinstance(self.embed_positions, TargetPositions):
                raise ValueError("documents: packed targets need learned positions (BART's)")
            targets, sources = (d.to(prev_output_tokens.device) for d in documents)
            padding = prev_output_tokens.eq(self.padding_idx)
            positions = document_positions(targets, padding, self.padding_idx)
            self_allowed, allowed = packed_decoder_masks(
                targets, padding, sources, encoder_out["encoder_padding_mask"][0]
            )
        for attention in self._attentions:
            attention.allowed = self_allowed if attention.self_attention else allowed
        if isinstance(self.embed_positions, TargetPositions):
            self.embed_positions.packed = positions
        return super().forward(prev_output_tokens, encoder_out, incremental_state, **kwargs)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = LEDDecoderLayer(cfg, no_encoder_attn)
        layer.compile_layers = self.compile_layers
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        # FSDP wraps a checkpointed layer whatever its size, as fairseq's decoder does.
        return fsdp_wrap(layer, min_num_params=0 if cfg.checkpoint_activations else cfg.min_params_to_wrap)


def packed_decoder_masks(
    targets: torch.Tensor, target_padding: torch.Tensor, sources: torch.Tensor, source_padding: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs a decoder attends in packed rows: ``(B, T, T)`` bool for its self-attention
    (causal, within each target) and ``(B, T, S)`` for its cross-attention (each target's
    own source). A padded query attends to everything: never an empty softmax, whose NaN
    would reach the gradients through the ignored positions.

    Args:
        targets, sources: ``(B, T)`` and ``(B, S)`` document ids (the ``i``-th target of a
            row is the ``i``-th source's).
        target_padding, source_padding: ``(B, T)`` and ``(B, S)`` bool, True for padding.
    """
    index = torch.arange(targets.shape[1], device=targets.device)
    causal = index[None, :, None] >= index[None, None, :]
    same = (targets[:, :, None] == targets[:, None, :]) & causal & ~target_padding[:, None, :]
    cross = (targets[:, :, None] == sources[:, None, :]) & ~source_padding[:, None, :]
    query_padding = target_padding[:, :, None]
    return same | query_padding, cross | query_padding


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

    def forward(self, src_tokens, src_lengths, prev_output_tokens, documents=None, target_documents=None,
                max_documents=None, **kwargs):  # fmt: skip
        """BART's. Rows that pack several pairs (``longformer_translation --pack``) add the
        sources' and the targets' document ids, ``(B, S)`` and ``(B, T)``, and the most
        pairs a row holds (``max_documents``, when the batch counted them)."""
        if documents is not None:
            self.encoder.set_documents(documents, max_documents)
        self.decoder.set_documents(target_documents, documents)
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

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
