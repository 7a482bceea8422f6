"""fairseq's Transformer encoder with Longformer self-attention in every layer.

Shared by ``longformer_roberta`` (as RoBERTa's sentence encoder) and ``led`` (as BART's
encoder). The layers keep fairseq's (post-layernorm) structure and parameter names, so
RoBERTa and BART state dicts load as they are, plus each layer's global projections.

Which tokens get global attention is decided per batch, as the union of:

- the model's global tokens (``--global-attention-tokens``, e.g. ``<s>``; with
  ``first_only``, only each row's first occurrence: LED's first ``<s>``);
- a ``(B, T)`` mask the task puts in the batch (``net_input["global_attention_mask"]``),
  for tasks whose global tokens come from the data (a question, answer candidates).

fairseq's encoder layers pass only the padding mask to their attention, so the encoder
hands the batch's global mask to every attention module before its layers run, and so the
document ids of rows that pack several documents (``net_input["documents"]``): each
document is attended alone, its global tokens global within it, and its positions restart
(:func:`~longformer_fs.modules.packing.document_positions`).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules import LearnedPositionalEmbedding
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.utils import safe_getattr

from ..attention import GlobalTokens, LongformerSelfAttention
from ..modules.compiled import allow_graphs, compiled_in_training
from ..modules.packing import document_positions, document_starts
from ..modules.per_layer import layer_values
from .weight_layout import copy_global_projections

logger = logging.getLogger(__name__)


class FairseqLongformerAttention(LongformerSelfAttention):
    """:class:`LongformerSelfAttention` behind fairseq's ``MultiheadAttention`` call.

    Its parameters carry MultiheadAttention's names (``q_proj`` ... ``out_proj``), plus
    ``*_proj_global``. The tokens with global attention are set per batch by
    :class:`LongformerTransformerEncoder` through :meth:`set_global_tokens`.
    """

    global_tokens: GlobalTokens | None = None
    documents: torch.Tensor | None = None
    max_documents: int | None = None

    def set_global_tokens(
        self, tokens: GlobalTokens | None, documents: torch.Tensor | None = None, max_documents: int | None = None
    ) -> None:
        """The batch's global tokens for the coming forward, found once for every layer
        (kept for activation recomputation), the document ids ``(B, T)`` of packed rows and
        the most documents a row holds, when the batch counted them."""
        self.global_tokens, self.documents, self.max_documents = tokens, documents, max_documents

    def forward(self, query, key=None, value=None, key_padding_mask=None, need_weights=False, attn_mask=None, **unused):
        """query: ``(T, B, C)``; key_padding_mask: ``(B, T)``. Returns ``((T, B, C), None)``."""
        if attn_mask is not None:
            raise ValueError("attn_mask: Longformer attention takes windows, not an attention mask")
        if key is not None and key is not query:
            raise ValueError("key: Longformer attention is self-attention only")
        return super().forward(
            query, key_padding_mask, self.global_tokens, documents=self.documents, max_documents=self.max_documents
        ), None


class LongformerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with Longformer self-attention; compiled in training with
    ``--compile-layers`` (:mod:`~longformer_fs.modules.compiled`)."""

    forward = compiled_in_training(TransformerEncoderLayerBase.forward)

    def __init__(self, cfg: TransformerConfig, window: int, dilation: int, causal: bool, max_global: int | None):
        # build_self_attention runs inside the base __init__ and reads these.
        self.window, self.dilation, self.causal, self.max_global = window, dilation, causal, max_global
        super().__init__(cfg)

    def prepare_compiled(self, x, encoder_padding_mask=None, attn_mask=None):
        """Around a compiled forward: the attention's band inputs, built outside its graph."""
        return self.self_attn.band_prepared(x, encoder_padding_mask)

    def build_self_attention(self, embed_dim, cfg):
        return FairseqLongformerAttention(
            embed_dim, cfg.encoder.attention_heads, self.window, self.dilation, self.causal,
            dropout=cfg.attention_dropout, max_global=self.max_global,
        )  # fmt: skip


def add_compile_layers_arg(parser) -> None:
    """``--compile-layers``, shared by the models over fairseq's layers."""
    parser.add_argument(
        "--compile-layers",
        action="store_true",
        help="torch.compile the layers while training, one compiled region per layer type (docs/gpus.md); "
        "compiles a bounded number of graphs whatever the lengths. Evaluation and generation stay eager",
    )


def add_max_global_tokens_arg(parser) -> None:
    """``--max-global-tokens``, shared by the models over this encoder."""
    parser.add_argument(
        "--max-global-tokens",
        type=int,
        metavar="N",
        help="a fixed bound on the global tokens of a sequence, of each document in rows that pack several "
        "(default: none, the count is read per batch). "
        "With a bound, torch.compile traces global attention without a graph break and nothing is read back "
        "from the GPU; a sequence over it is an error. E.g. the question length plus one for TriviaQA",
    )


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


def global_attention_possible(args) -> bool:
    """Whether any token can get global attention: named tokens (``--global-attention-tokens``)
    or masks in the batch (``--global-attention-from-data``); configs older than the flag
    lack the key (a fine-tuned one has it, set by its task)."""
    return bool(safe_getattr(args, "global_attention_tokens", "")) or bool(
        safe_getattr(args, "global_attention_from_data", False)
    )


class LongformerTransformerEncoder(TransformerEncoder):
    """A fairseq ``TransformerEncoder`` with per-layer windows and global tokens.

    Args:
        args: the model's settings; reads ``encoder_layers``, ``attention_window``,
            ``attention_dilation`` (per layer), ``causal_attention``,
            ``global_attention_tokens`` and ``max_global_tokens``.
        first_only: only each row's first global-token occurrence is global (LED).
    """

    def __init__(self, args, dictionary, embed_tokens, first_only: bool = False):
        # The base __init__ builds the layers in order, from a TransformerConfig that lacks
        # our settings: they take them from here.
        settings = list(zip(*self.layer_windows(args), strict=True))
        self.layer_settings = iter(settings)
        self.causal = bool(safe_getattr(args, "causal_attention", False))
        self.max_global = safe_getattr(args, "max_global_tokens", None)
        self.compile_layers = bool(safe_getattr(args, "compile_layers", False))
        super().__init__(args, dictionary, embed_tokens)
        if self.compile_layers:
            allow_graphs(len(set(settings)))
        # A buffer: it moves with the model, so no forward copies it to the device.
        self.register_buffer(
            "global_token_ids",
            global_token_ids(safe_getattr(args, "global_attention_tokens", ""), dictionary),
            persistent=False,
        )
        self.first_only = first_only
        self._batch_global_mask: torch.Tensor | None = None
        self._batch_documents: torch.Tensor | None = None
        self._batch_max_documents: int | None = None
        self._batch_max_global: int | None = None

    @staticmethod
    def layer_windows(args) -> tuple[list, list]:
        """Each layer's window and dilation, bottom first."""
        layers = args.encoder_layers
        return (
            layer_values(args.attention_window, layers, "attention window"),
            layer_values(safe_getattr(args, "attention_dilation", "1") or "1", layers, "attention dilation"),
        )

    def build_encoder_layer(self, cfg):
        if not isinstance(cfg, TransformerConfig):
            cfg = TransformerConfig.from_namespace(cfg)
        window, dilation = next(self.layer_settings)
        layer = LongformerEncoderLayer(cfg, window, dilation, self.causal, self.max_global)
        layer.compile_layers = self.compile_layers
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return layer

    def attention_modules(self) -> list[FairseqLongformerAttention]:
        return [m for m in self.modules() if isinstance(m, FairseqLongformerAttention)]

    def init_global_projections(self, trainable: bool) -> None:
        """Start every layer's global projections as copies of its local ones (the paper's
        initialisation). Frozen when no token can be global (MLM pretraining): they are
        never used, so DDP and the optimizer skip them, as unused weights never change."""
        for attention in self.attention_modules():
            copy_global_projections(attention)
            for projection in attention.global_projections():
                projection.requires_grad_(trainable)
        if not trainable:
            logger.info(
                "global projections frozen: no token gets global attention "
                "(see --global-attention-tokens and --global-attention-from-data)"
            )

    def set_global_attention_mask(self, mask: torch.Tensor | None, max_global: int | None = None) -> None:
        """A ``(B, T)`` bool mask from the batch, for the next forward only, and the most
        global tokens it marks in a row when the batch says (its collater counts them on
        the host, where that costs no wait for the device)."""
        self._batch_global_mask, self._batch_max_global = mask, max_global

    def set_documents(self, documents: torch.Tensor | None, max_documents: int | None = None) -> None:
        """The ``(B, T)`` document ids of the next forward's packed rows, or None (one
        document a row), for the next forward only, and the most documents a row holds when
        the batch says (its collater counts them on the host)."""
        self._batch_documents, self._batch_max_documents = documents, max_documents

    def global_bound(self, from_batch: bool) -> int | None:
        """A bound on the global tokens of a row for this forward, or None (the layers then
        read the count back from the device): ``--max-global-tokens`` when set, else what
        the configured tokens can add (one per id when only their first occurrence is
        global, as in LED; unknown otherwise) plus the batch's own count. In packed rows
        ``--max-global-tokens`` and the first occurrences hold per document, so a row's
        bound is that times the batch's most documents in a row (unknown when the batch
        does not say); the batch's own count is already a row's."""
        packed, most = self._batch_documents is not None, self._batch_max_documents

        def per_row(per_document: int) -> int | None:
            if not packed or per_document == 0:
                return per_document
            return None if most is None else per_document * most

        if self.max_global is not None:
            return per_row(self.max_global)
        configured = len(self.global_token_ids)
        if configured and not self.first_only:
            return None
        configured = per_row(configured)
        if not from_batch:
            return configured
        if configured is None or self._batch_max_global is None:
            return None
        return configured + self._batch_max_global

    def global_mask(self, src_tokens: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor | None:
        """``(B, T)`` bool: the configured global tokens of this batch, or None. With
        ``first_only``, each row's first occurrence, or in packed rows (``documents``
        ``(B, T)``) each document's."""
        if not self.global_token_ids.numel():
            return None
        # A comparison with each of the few ids, not torch.isin, which ONNX lacks.
        mask = (src_tokens[..., None] == self.global_token_ids).any(dim=-1)
        if self.first_only:
            seen = mask.cumsum(dim=1)
            if documents is not None:  # less the occurrences before each document's start
                seen = seen - (seen - mask.long()).gather(1, document_starts(documents))
            mask = mask & (seen == 1)
        return mask

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
        documents, from_batch = self._batch_documents, self._batch_global_mask
        if documents is not None:
            documents = documents.to(src_tokens.device)
        mask, bound = self.global_mask(src_tokens, documents), self.global_bound(from_batch is not None)
        most = self._batch_max_documents
        self._batch_documents = self._batch_max_documents = None
        self._batch_global_mask = self._batch_max_global = None
        if from_batch is not None:
            if from_batch.shape != src_tokens.shape:
                raise ValueError(
                    f"global_attention_mask: shape {tuple(from_batch.shape)} does not match the "
                    f"source tokens' {tuple(src_tokens.shape)}"
                )
            from_batch = from_batch.to(device=src_tokens.device, dtype=torch.bool)
            mask = from_batch if mask is None else mask | from_batch
        padding = src_tokens.eq(self.padding_idx)
        tokens = GlobalTokens.find(mask, padding, bound)
        for attention in self.attention_modules():
            attention.set_global_tokens(tokens, documents, most)
        return self._encode(src_tokens, padding, return_all_hiddens, token_embeddings, documents)

    def forward_embedding(self, src_tokens, token_embedding=None, documents=None):
        """fairseq's, with each packed document's positions restarting (``documents``)."""
        if documents is None:
            return super().forward_embedding(src_tokens, token_embedding)
        if not isinstance(self.embed_positions, LearnedPositionalEmbedding):
            raise ValueError("documents: packed rows need learned positions (RoBERTa's, BART's)")
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        positions = document_positions(documents, src_tokens.eq(self.padding_idx), self.padding_idx)
        x = embed + F.embedding(positions, self.embed_positions.weight, self.padding_idx)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    def _encode(self, src_tokens, padding, return_all_hiddens: bool, token_embeddings, documents=None) -> dict:
        """fairseq's ``TransformerEncoder.forward_scriptable`` without its host waits.

        fairseq asks the device whether a batch holds padding (``encoder_padding_mask.any()``)
        and again in every layer (``if has_pads``), so the host waits on the GPU once a
        layer. Here every layer takes the padding mask as it is: the attention takes a
        mask of no padding as cheaply as none (``padding``: ``(B, T)`` bool, the source's
        ``padding_idx``). The outputs are fairseq's.
        """
        x, embedding = self.forward_embedding(src_tokens, token_embeddings, documents)
        x = x.masked_fill(padding.unsqueeze(-1), 0.0).transpose(0, 1)  # (T, B, C), padded rows 0
        states, fc_results = ([x] if return_all_hiddens else []), []
        for layer in self.layers:
            out = layer(x, encoder_padding_mask=padding)
            x, fc_result = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
            if return_all_hiddens:
                states.append(x)
                fc_results.append(fc_result)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        lengths = padding.logical_not().sum(dim=1, dtype=torch.int32).reshape(-1, 1)
        return {
            "encoder_out": [x],  # (T, B, C)
            "encoder_padding_mask": [padding],  # (B, T)
            "encoder_embedding": [embedding],  # (B, T, C)
            "encoder_states": states,  # [(T, B, C)]
            "fc_results": fc_results,
            "src_tokens": [],
            "src_lengths": [lengths],
        }
