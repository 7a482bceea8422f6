"""``longformer_roberta``: fairseq's RoBERTa with Longformer attention in every layer.

The paper's second experiment (§5): a pretrained RoBERTa reads 4,096 tokens once its
self-attention is replaced by sliding windows (w = 256 per side by default) and its
position table is extended by copying (``longformer-fs convert-roberta``). Everything
else (embeddings, LM head, post-layernorm layers, ``masked_lm`` task and criterion) is
fairseq's RoBERTa, so its checkpoints, hub interface and fine-tuning tasks keep working.

Like RoBERTa, the model takes argparse-style arguments (``--arch longformer_roberta_base``
on the command line, ``model._name: longformer_roberta_base`` under Hydra), which keeps
every RoBERTa option available unchanged.
"""

from __future__ import annotations

import logging
import re

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import (
    RobertaEncoder,
    RobertaModel,
    roberta_base_architecture,
    roberta_large_architecture,
)
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from ..attention import LongformerSelfAttention
from ..modules.per_layer import layer_values
from .checkpoints import add_global_projections, copy_global_projections, reserved_position_rows

logger = logging.getLogger(__name__)

DEFAULT_WINDOW = 256  # one side: the paper's 512-token window
DEFAULT_MAX_POSITIONS = 4096

# The state-dict layout (fairseq's RoBERTa keys, which this model keeps).
SENTENCE_ENCODER = "encoder.sentence_encoder."
LAYERS = SENTENCE_ENCODER + "layers."
TOKEN_EMBEDDINGS = SENTENCE_ENCODER + "embed_tokens.weight"
POSITIONS = SENTENCE_ENCODER + "embed_positions.weight"
EMBEDDING_NORM = SENTENCE_ENCODER + "layernorm_embedding."
LM_HEAD = "encoder.lm_head."
_LAYER_QUERY = re.compile(r"^" + re.escape(LAYERS) + r"(\d+)\.self_attn\.q_proj\.weight$")


def encoder_layers(state_dict: dict) -> int:
    """How many encoder layers (with self-attention) a RoBERTa-style state dict holds."""
    return len({m.group(1) for k in state_dict if (m := _LAYER_QUERY.match(k))})


class FairseqLongformerAttention(LongformerSelfAttention):
    """:class:`LongformerSelfAttention` behind fairseq's ``MultiheadAttention`` call.

    Its parameters carry MultiheadAttention's names (``q_proj`` ... ``out_proj``), so a
    RoBERTa state dict loads as is, plus ``*_proj_global``. fairseq's encoder layer
    only passes the padding mask; the tokens with global attention are set per batch by
    :class:`LongformerTransformerEncoder` through :meth:`set_global_mask`.
    """

    global_mask: torch.Tensor | None = None

    def set_global_mask(self, mask: torch.Tensor | None) -> None:
        """``(B, T)`` bool for the coming forward (kept for activation recomputation)."""
        self.global_mask = mask

    def forward(self, query, key=None, value=None, key_padding_mask=None, need_weights=False, attn_mask=None, **unused):
        """query: ``(T, B, C)``; key_padding_mask: ``(B, T)``. Returns ``((T, B, C), None)``."""
        if attn_mask is not None:
            raise ValueError("attn_mask: Longformer attention takes windows, not an attention mask")
        if key is not None and key is not query:
            raise ValueError("key: Longformer attention is self-attention only")
        return super().forward(query, key_padding_mask, self.global_mask), None


class LongformerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's (post-layernorm) encoder layer with Longformer self-attention."""

    def __init__(self, cfg: TransformerConfig, window: int, dilation: int, causal: bool):
        # build_self_attention runs inside the base __init__ and reads these.
        self.window, self.dilation, self.causal = window, dilation, causal
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return FairseqLongformerAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            self.window,
            self.dilation,
            self.causal,
            dropout=cfg.attention_dropout,
        )


class LongformerTransformerEncoder(TransformerEncoder):
    """RoBERTa's sentence encoder with per-layer windows and optional global tokens."""

    def __init__(self, args, dictionary, embed_tokens):
        layers = args.encoder_layers
        # The base __init__ builds the layers in order, from a TransformerConfig that lacks
        # our settings: they take them from here.
        self.layer_settings = iter(
            zip(
                layer_values(args.attention_window, layers, "attention window"),
                layer_values(args.attention_dilation, layers, "attention dilation"),
                strict=True,
            )
        )
        self.causal = bool(safe_getattr(args, "causal_attention", False))
        super().__init__(args, dictionary, embed_tokens)
        self.global_token_ids = global_token_ids(args.global_attention_tokens, dictionary)

    def build_encoder_layer(self, cfg):
        if not isinstance(cfg, TransformerConfig):
            cfg = TransformerConfig.from_namespace(cfg)
        window, dilation = next(self.layer_settings)
        layer = LongformerEncoderLayer(cfg, window, dilation, self.causal)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return layer

    def attention_modules(self) -> list[FairseqLongformerAttention]:
        return [m for m in self.modules() if isinstance(m, FairseqLongformerAttention)]

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
        mask = None
        if self.global_token_ids.numel():
            mask = torch.isin(src_tokens, self.global_token_ids.to(src_tokens.device))
        for attention in self.attention_modules():
            attention.set_global_mask(mask)
        return super().forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)


def global_token_ids(symbols: str, dictionary) -> torch.Tensor:
    """Dictionary ids of a comma-separated list of symbols such as ``"<s>"``."""
    ids = []
    for symbol in (s.strip() for s in (symbols or "").split(",")):
        if not symbol:
            continue
        index = dictionary.index(symbol)
        if index == dictionary.unk() and symbol != dictionary.unk_word:
            raise ValueError(f"global_attention_tokens: {symbol!r} is not in the dictionary")
        ids.append(index)
    return torch.tensor(ids, dtype=torch.long)


class LongformerRobertaEncoder(RobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = LongformerTransformerEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        # The paper starts the global projections as copies of the local ones. A model
        # in which no token can be global (MLM pretraining) never uses them: they are
        # frozen, as unused weights would be, so that DDP and the optimizer skip them.
        trainable = global_attention_possible(args)
        for attention in encoder.attention_modules():
            copy_global_projections(attention)
            for projection in attention.global_projections():
                projection.requires_grad_(trainable)
        if not trainable:
            logger.info("global projections frozen: no token gets global attention (see --global-attention-tokens)")
        return encoder


def global_attention_possible(args) -> bool:
    """Whether any token can get global attention: named tokens, or masks from the task."""
    return bool(safe_getattr(args, "global_attention_tokens", "")) or bool(
        safe_getattr(args, "global_attention_from_data", False)
    )


@register_model("longformer_roberta")
class LongformerRobertaModel(RobertaModel):
    """RoBERTa whose encoder reads long inputs through Longformer attention."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument(
            "--attention-window",
            type=str,
            metavar="W",
            help="one-sided window per layer: 'w' for all layers or 'w0,w1,...' "
            f"(default {DEFAULT_WINDOW}, the paper's 512-token window)",
        )
        parser.add_argument(
            "--attention-dilation",
            type=str,
            metavar="D",
            help="dilation per layer, as --attention-window (default 1: none)",
        )
        parser.add_argument(
            "--causal-attention",
            action="store_true",
            help="attend only to earlier tokens (not for masked LM; HF export refuses it)",
        )
        parser.add_argument(
            "--global-attention-tokens",
            type=str,
            metavar="SYMBOLS",
            help="comma-separated dictionary symbols that get global attention, e.g. '<s>' "
            "(default: none, as in the paper's pretraining)",
        )

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        longformer_roberta_base_architecture(args)
        encoder = LongformerRobertaEncoder(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, encoder)

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name else ""
        # A plain RoBERTa state dict lacks the global projections: start them as copies.
        added = add_global_projections(state_dict, prefix + LAYERS)
        if added:
            logger.info("initialised %d global projections from the local ones", added)
        key = prefix + POSITIONS
        encoder = self.encoder.sentence_encoder
        reserved = reserved_position_rows(encoder.padding_idx)
        expected = encoder.embed_positions.weight.shape[0] - reserved
        if key in state_dict and state_dict[key].shape[0] - reserved != expected:
            raise ValueError(
                f"{key}: the checkpoint has {state_dict[key].shape[0] - reserved} positions but this model "
                f"{expected}; convert it first with `longformer-fs convert-roberta --max-positions {expected}`"
            )
        super().upgrade_state_dict_named(state_dict, name)


def _defaults(args, max_positions: int = DEFAULT_MAX_POSITIONS) -> None:
    # safe_getattr keeps a None that argparse left, hence the explicit checks.
    if safe_getattr(args, "attention_window", None) is None:
        args.attention_window = str(DEFAULT_WINDOW)
    if safe_getattr(args, "attention_dilation", None) is None:
        args.attention_dilation = "1"
    args.causal_attention = bool(safe_getattr(args, "causal_attention", False))
    if safe_getattr(args, "global_attention_tokens", None) is None:
        args.global_attention_tokens = ""
    if safe_getattr(args, "max_positions", None) is None:
        args.max_positions = max_positions


@register_model_architecture("longformer_roberta", "longformer_roberta")
def longformer_roberta_base_architecture(args):
    _defaults(args)
    roberta_base_architecture(args)


@register_model_architecture("longformer_roberta", "longformer_roberta_base")
def longformer_roberta_base(args):
    longformer_roberta_base_architecture(args)


@register_model_architecture("longformer_roberta", "longformer_roberta_large")
def longformer_roberta_large(args):
    _defaults(args)
    roberta_large_architecture(args)
