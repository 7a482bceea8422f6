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
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import (
    RobertaEncoder,
    RobertaModel,
    roberta_base_architecture,
    roberta_large_architecture,
)
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from ..heads import TOKEN_HEADS
from .longformer_encoder import (
    LongformerTransformerEncoder,
    add_compile_layers_arg,
    add_max_global_tokens_arg,
    global_attention_possible,
)
from .pretrained import FromPretrained
from .weight_layout import add_global_projections, check_learned_positions

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


class LongformerRobertaEncoder(RobertaEncoder):
    """RoBERTa's encoder (embeddings, LM head) around a Longformer sentence encoder."""

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = LongformerTransformerEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        encoder.init_global_projections(trainable=global_attention_possible(args))
        return encoder

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False, masked_tokens=None, **kwargs):
        """As RoBERTa's, plus ``global_attention_mask`` ``(B, T)`` from tasks that mark
        their global tokens per example, ``max_global_tokens``, the most that mask marks
        in a row, when the batch counted them, and ``documents`` ``(B, T)``, the document
        ids of rows that pack several documents (each then attended, and numbered, alone),
        with ``max_documents``, the most a row holds, when the batch counted them."""
        self.sentence_encoder.set_global_attention_mask(
            kwargs.pop("global_attention_mask", None), kwargs.pop("max_global_tokens", None)
        )
        self.sentence_encoder.set_documents(kwargs.pop("documents", None), kwargs.pop("max_documents", None))
        return super().forward(src_tokens, features_only, return_all_hiddens, masked_tokens, **kwargs)


@register_model("longformer_roberta")
class LongformerRobertaModel(FromPretrained, RobertaModel):
    """RoBERTa whose encoder reads long inputs through Longformer attention.

    Besides RoBERTa's classification heads (on the first token), the model keeps the heads
    the fine-tuning tasks register (``token_heads``, by name, the name being the key in
    checkpoints): a linear map of every token's features (extractive QA: 2 outputs, start
    and end; multiple choice: 1, at the candidates), or a module the task builds
    (HotpotQA's evidence scorers, coreference's span scorer).
    """

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        self.token_heads = nn.ModuleDict()

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False, classification_head_name=None,
                **kwargs):  # fmt: skip
        """RoBERTa's. In rows that pack several documents, ``document_starts`` ``(N,)`` (each
        document's first token as a flat index into the batch's ``B x T`` positions) has a
        classification head read each document's first token: ``(N, classes)``, the
        documents in row order."""
        starts = kwargs.pop("document_starts", None)
        if starts is None or classification_head_name is None:
            return super().forward(src_tokens, features_only, return_all_hiddens, classification_head_name, **kwargs)
        features, extra = self.encoder(src_tokens, True, return_all_hiddens, **kwargs)  # (B, T, C)
        firsts = features.reshape(-1, features.shape[-1]).index_select(0, starts.to(features.device))
        return self.classification_heads[classification_head_name](firsts[:, None]), extra

    @property
    def embed_dim(self) -> int:
        """The width ``C`` of the features heads read."""
        return self.encoder.sentence_encoder.embed_tokens.embedding_dim

    def register_token_head(self, name: str, head: int | nn.Module) -> nn.Module:
        """Add head ``name`` unless the model has it, and return the model's head.

        Args:
            head: an output count (a linear map ``(B, T, C) -> (B, T, head)``, BERT-
                initialised), or a module the task built, taking ``(..., C)`` features.
        """
        if isinstance(head, int):
            if name in self.token_heads and self.token_heads[name].out_features != head:
                raise ValueError(
                    f"token head {name!r}: has {self.token_heads[name].out_features} outputs, asked for {head}"
                )
            linear = nn.Linear(self.embed_dim, head)
            init_bert_params(linear)
            head = linear
        elif name in self.token_heads and type(self.token_heads[name]) is not type(head):
            raise ValueError(
                f"token head {name!r}: is a {type(self.token_heads[name]).__name__}, not a {type(head).__name__}"
            )
        if name not in self.token_heads:
            self.token_heads[name] = head
        return self.token_heads[name]

    def token_logits(self, name: str, features: torch.Tensor) -> torch.Tensor:
        """``(B, T, C)`` features -> ``(B, T, K)`` outputs of token head ``name``."""
        return self.token_heads[name](features)

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
        parser.add_argument(
            "--global-attention-from-data",
            action="store_true",
            help="each batch marks the tokens that get global attention (a global_attention_mask: "
            "question, candidates); the tasks whose data marks them, longformer_qa and longformer_wikihop, "
            "set it",
        )
        add_max_global_tokens_arg(parser)
        add_compile_layers_arg(parser)

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
        encoder = self.encoder.sentence_encoder
        check_learned_positions(
            state_dict,
            prefix + POSITIONS,
            encoder.embed_positions,
            encoder.padding_idx,
            "positions",
            "convert-roberta --max-positions",
        )
        key = prefix + TOKEN_EMBEDDINGS
        rows = encoder.embed_tokens.weight.shape[0]
        if key in state_dict and state_dict[key].shape[0] != rows:
            raise ValueError(
                f"{key}: the checkpoint has {state_dict[key].shape[0]} token embeddings but the task's "
                f"dictionary {rows}; a dictionary with new symbols (WikiHop's) needs them in the checkpoint: "
                "`longformer-fs convert-roberta --add-tokens '[q],[/q],[ent],[/ent]'`"
            )
        # Token heads the checkpoint lacks (fine-tuning starts) keep their new weights;
        # heads of another task in the checkpoint are left out.
        heads = prefix + TOKEN_HEADS
        registered = self.token_heads.state_dict()
        for key in [k for k in state_dict if k.startswith(heads)]:
            if key[len(heads) :] not in registered:
                logger.info("dropping token head %s (not registered by this task)", key)
                del state_dict[key]
        for key, value in registered.items():
            state_dict.setdefault(heads + key, value)
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
