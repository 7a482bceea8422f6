"""fairseq adapter: the ``longformer_lm`` character language model.

A thin wrapper over :class:`longformer_fs.modules.decoder.LongformerDecoder`. Windows
grow from the bottom layer to the top; dilation applies to the last
``--dilated-heads`` heads of each layer.
"""

# No `from __future__ import annotations` here: fairseq builds its argparse options from
# the dataclass field types and cannot read string annotations.
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqDecoder, FairseqLanguageModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from longformer_fs.modules.decoder import DecoderShape, LongformerDecoder
from longformer_fs.modules.per_layer import dilation_pattern, layer_values


@dataclass
class LongformerLMConfig(FairseqDataclass):
    decoder_embed_dim: int = field(default=512, metadata={"help": "model width"})
    decoder_ffn_embed_dim: int = field(default=2048, metadata={"help": "feed-forward inner width"})
    decoder_layers: int = field(default=12, metadata={"help": "number of layers"})
    decoder_attention_heads: int = field(default=8, metadata={"help": "attention heads per layer"})
    dropout: float = field(default=0.2, metadata={"help": "dropout on embeddings and residual branches"})
    attention_dropout: float = field(
        default=0.0, metadata={"help": "dropout on attention probabilities (> 0 rules out the kernel backend)"}
    )
    attention_windows: str = field(
        default="16:4096",
        metadata={
            "help": "one-sided window per layer, bottom first: 'w', 'w0,w1,...', or 'lo:hi' "
            "(geometric from lo to hi). The paper's window size is 2w"
        },
    )
    attention_dilations: str = field(
        default="1",
        metadata={"help": "dilation d of the dilated heads per layer ('d' or 'd0,d1,...'); d=1 means no gaps"},
    )
    dilated_heads: int = field(default=2, metadata={"help": "how many heads of each layer use the dilation"})
    attention_backend: str = field(default="auto", metadata={"help": "band backend: auto, kernel, chunks"})
    checkpoint_activations: bool = field(
        default=False, metadata={"help": "recompute each block in backward to save memory"}
    )
    # fairseq-train sets this from the task; declared Optional because it may be None.
    max_target_positions: Optional[int] = field(default=None, metadata={"help": "longest sequence"})


class LongformerLMDecoder(FairseqDecoder):
    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        shape = DecoderShape(
            vocab_size=len(dictionary),
            padding_idx=dictionary.pad(),
            embed_dim=cfg.decoder_embed_dim,
            ffn_dim=cfg.decoder_ffn_embed_dim,
            num_heads=cfg.decoder_attention_heads,
            windows=layer_values(cfg.attention_windows, cfg.decoder_layers),
            dilations=dilation_pattern(
                cfg.attention_dilations, cfg.decoder_layers, cfg.decoder_attention_heads, cfg.dilated_heads
            ),
        )
        self.max_target_positions = cfg.max_target_positions
        self.net = LongformerDecoder(
            shape, cfg.dropout, cfg.attention_dropout, cfg.checkpoint_activations, cfg.attention_backend
        )

    def forward(self, prev_output_tokens, **kwargs):
        logits, states = self.net(prev_output_tokens)
        return logits, {"inner_states": states}

    def max_positions(self):
        return self.max_target_positions or int(1e9)


@register_model("longformer_lm", dataclass=LongformerLMConfig)
class LongformerLanguageModel(FairseqLanguageModel):
    @classmethod
    def build_model(cls, cfg, task):
        return cls(LongformerLMDecoder(cfg, task.target_dictionary))


def _paper_defaults(args, layers: int, dropout: float) -> None:
    # Only used by fairseq-train's --arch; Hydra runs take these values from presets.
    args.decoder_layers = safe_getattr(args, "decoder_layers", layers)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 512)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 2048)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 8)
    args.dropout = safe_getattr(args, "dropout", dropout)


@register_model_architecture("longformer_lm", "longformer_lm_small")
def longformer_lm_small(args):
    """Paper, Appendix A: 12 layers, 8 heads, width 512, dropout 0.2."""
    _paper_defaults(args, layers=12, dropout=0.2)


@register_model_architecture("longformer_lm", "longformer_lm_large")
def longformer_lm_large(args):
    """Paper, Appendix A: 30 layers, 8 heads, width 512, dropout 0.4."""
    _paper_defaults(args, layers=30, dropout=0.4)
