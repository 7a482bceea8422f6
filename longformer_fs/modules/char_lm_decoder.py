"""The character-LM decoder: pre-layernorm Transformer blocks over relative band attention.

Plain PyTorch; ``longformer_fs.models.longformer_lm`` adapts it to fairseq.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..attention.cache import BandCache
from ..attention.relative_layer import RelativeBandSelfAttention
from .compiled import allow_graphs, compiled_in_training


@dataclass(frozen=True)
class DecoderShape:
    """Sizes of a :class:`LongformerDecoder`.

    ``windows[l]`` is layer l's one-sided window (bottom layer first);
    ``dilations[l]`` its per-head dilations.
    """

    vocab_size: int
    padding_idx: int
    embed_dim: int
    ffn_dim: int
    num_heads: int
    windows: tuple[int, ...]
    dilations: tuple[tuple[int, ...], ...]
    causal: bool = True

    @property
    def num_layers(self) -> int:
        return len(self.windows)


class DecoderBlock(nn.Module):
    """x + attn(LN(x)), then x + FFN(LN(x)) with GeLU (pre-layernorm); compiled in training
    with ``compile_layers`` (:mod:`.compiled`)."""

    compile_layers = False

    def __init__(self, shape: DecoderShape, layer: int, dropout: float, attention_dropout: float, backend: str):
        super().__init__()
        self.attn_norm = nn.LayerNorm(shape.embed_dim)
        self.attn = RelativeBandSelfAttention(
            shape.embed_dim,
            shape.num_heads,
            shape.windows[layer],
            shape.dilations[layer],
            shape.causal,
            attention_dropout,
            backend,
        )
        self.ffn_norm = nn.LayerNorm(shape.embed_dim)
        self.fc1 = nn.Linear(shape.embed_dim, shape.ffn_dim)
        self.fc2 = nn.Linear(shape.ffn_dim, shape.embed_dim)
        self.dropout = dropout

    def prepare_compiled(self, x: torch.Tensor, pad: torch.Tensor | None, cache: BandCache | None = None):
        """Around a compiled forward: the attention's band inputs, built outside its graph."""
        return self.attn.band_prepared(x, pad)  # the attention's input has x's shape, dtype and device

    @compiled_in_training
    def forward(self, x: torch.Tensor, pad: torch.Tensor | None, cache: BandCache | None = None) -> torch.Tensor:
        x = x + F.dropout(self.attn(self.attn_norm(x), pad, cache), self.dropout, self.training)
        hidden = F.dropout(F.gelu(self.fc1(self.ffn_norm(x))), self.dropout, self.training)
        return x + F.dropout(self.fc2(hidden), self.dropout, self.training)


class LongformerDecoder(nn.Module):
    """Token embeddings, blocks, final layernorm, output projection tied to the embeddings.

    Positions enter only through the relative term of each block's attention.
    """

    def __init__(
        self,
        shape: DecoderShape,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        checkpoint_activations: bool = False,
        backend: str = "auto",
        compile_layers: bool = False,
    ):
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab_size, shape.embed_dim, padding_idx=shape.padding_idx)
        nn.init.normal_(self.embed.weight, std=shape.embed_dim**-0.5)
        self.blocks = nn.ModuleList(
            DecoderBlock(shape, i, dropout, attention_dropout, backend) for i in range(shape.num_layers)
        )
        for block in self.blocks:
            block.compile_layers = compile_layers
        if compile_layers:  # each layer's window and dilations are constants of its graph
            allow_graphs(len(set(zip(shape.windows, shape.dilations, strict=True))))
        self.final_norm = nn.LayerNorm(shape.embed_dim)
        self.dropout = dropout
        self.checkpoint_activations = checkpoint_activations

    def key_padding(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """The attention's key mask for ``tokens`` ``(B, T)``: None for a causal model.

        fairseq's language-model datasets and ours pad on the right, and a causal query
        never sees a key after it: no real position can reach a padded one, so the band
        needs no mask (the backends' fastest kind), and nothing is read back to decide
        whether a batch is padded. Padding elsewhere would be seen: it fails an
        asynchronous check instead.
        """
        pad = tokens.eq(self.shape.padding_idx)
        if not self.shape.causal:
            return pad
        if tokens.shape[1] > 1:
            torch._assert_async(
                ~(pad[:, :-1] & ~pad[:, 1:]).any(),
                "tokens: a causal character LM takes padding at the end of a row only (as fairseq's datasets pad)",
            )
        return None

    def new_caches(self) -> list[BandCache]:
        """Empty caches for incremental decoding, one a block (see :meth:`forward`)."""
        return [BandCache(block.attn.reach()) for block in self.blocks]

    def forward(
        self, tokens: torch.Tensor, caches: list[BandCache] | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """tokens: ``(B, T)`` -> logits ``(B, T, V)`` and each block's output ``(T, B, C)``.

        With ``caches`` (from :meth:`new_caches`, decoding): ``tokens`` are the ones after
        those the caches have seen (the prompt first, then one at a time); each block
        attends over its cache, so a step costs the same however long the text.
        """
        pad = self.key_padding(tokens) if caches is None else None
        # Decoding (caches): <pad> is read as a token, as fairseq's decoders read it; only a
        # hypothesis beam search carries dead (its score -inf) holds one.
        # (T, B, C) contiguous: each block's input and output, and their gradients, in one layout
        # (a compiled block's backward is traced for the layout its forward saw).
        x = F.dropout(self.embed(tokens).transpose(0, 1).contiguous(), self.dropout, self.training)
        states = []
        for layer, block in enumerate(self.blocks):
            if caches is not None:
                x = block(x, pad, caches[layer])
            elif self.checkpoint_activations and self.training:
                x = checkpoint(block, x, pad, use_reentrant=False)
            else:
                x = block(x, pad)
            states.append(x)
        x = self.final_norm(x).transpose(0, 1)
        return F.linear(x, self.embed.weight), states
