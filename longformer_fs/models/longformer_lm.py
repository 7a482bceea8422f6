"""fairseq adapter: the ``longformer_lm`` character language model.

A thin wrapper over :class:`longformer_fs.modules.char_lm_decoder.LongformerDecoder`. Windows
grow from the bottom layer to the top; dilation applies to the last
``--dilated-heads`` heads of each layer. The decoder is incremental: fairseq's
``SequenceGenerator`` (sampling, beam search) drives it, each layer keeping only the keys
and values its window reaches.

``--attention-window`` and ``--attention-dilation`` are spelt as in the encoder models
(and HF's ``attention_window``). The plural spellings this model used before are
deprecated but still read, from the command line, from Hydra and from the configs of
checkpoints trained with them.
"""

# No `from __future__ import annotations` here: fairseq builds its argparse options from
# the dataclass field types and cannot read string annotations.
import logging
from dataclasses import dataclass, field, fields
from typing import Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqIncrementalDecoder, FairseqLanguageModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from ..modules.char_lm_decoder import DecoderShape, LongformerDecoder
from ..modules.per_layer import dilation_pattern, layer_values
from .pretrained import FromPretrained

logger = logging.getLogger(__name__)


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
    attention_window: str = field(
        default="16:4096",
        metadata={
            "help": "one-sided window per layer, bottom first: 'w', 'w0,w1,...', or 'lo:hi' "
            "(geometric from lo to hi). The paper's window size is 2w"
        },
    )
    attention_dilation: str = field(
        default="1",
        metadata={"help": "dilation d of the dilated heads per layer ('d' or 'd0,d1,...'); d=1 means no gaps"},
    )
    dilated_heads: int = field(default=2, metadata={"help": "how many heads of each layer use the dilation"})
    attention_backend: str = field(default="auto", metadata={"help": "band backend: auto, kernel, chunks"})
    checkpoint_activations: bool = field(
        default=False, metadata={"help": "recompute each block in backward to save memory"}
    )
    compile_layers: bool = field(
        default=False,
        metadata={
            "help": "torch.compile the blocks while training, one compiled region for all (a graph per distinct "
            "window); evaluation and sampling stay eager (docs/gpus.md)"
        },
    )
    # fairseq-train sets this from the task; declared Optional because it may be None.
    max_target_positions: Optional[int] = field(default=None, metadata={"help": "longest sequence"})
    # The old spellings stay declared: a checkpoint trained with them holds them in its
    # cfg.model, and fairseq drops the keys its dataclass lacks when it loads one
    # (merge_with_parent with remove_missing), which would silently build the default
    # windows. Declared, they also keep old command lines and Hydra overrides working.
    # Read through `_renamed`, never directly.
    attention_windows: Optional[str] = field(
        default=None, metadata={"help": "deprecated spelling of --attention-window; use that"}
    )
    attention_dilations: Optional[str] = field(
        default=None, metadata={"help": "deprecated spelling of --attention-dilation; use that"}
    )


_DEFAULTS = {f.name: f.default for f in fields(LongformerLMConfig)}
_CACHES = "band_caches"  # the layers' caches, in fairseq's incremental state


def _renamed(cfg, name: str, old: str) -> str:
    """``cfg.<name>``, or the value given under its deprecated spelling ``old``.

    The deprecated value is taken when ``name`` is unset or at its default: a config does
    not tell whether a value came from the user, a recipe or the default, so any other
    value of ``name`` that differs counts as given, and two spellings that disagree are
    an error rather than a silent choice.
    """
    # A config may lack either key: checkpoints trained with --arch are rebuilt from their
    # saved cfg as it is, without the dataclass's defaults.
    value, legacy = safe_getattr(cfg, name, None), safe_getattr(cfg, old, None)
    value = _DEFAULTS[name] if value is None else str(value)
    if legacy is None:
        return value
    legacy = str(legacy)
    flag, old_flag = "--" + name.replace("_", "-"), "--" + old.replace("_", "-")
    if value != legacy and value != _DEFAULTS[name]:
        raise ValueError(
            f"{old_flag} (model.{old}) is the deprecated spelling of {flag} (model.{name}), and they differ: "
            f"{legacy!r} against {value!r} (from the command line or a recipe); give only {flag} "
            f"(model.{name})"
        )
    logger.warning(
        "%s (model.%s) is deprecated; use %s (model.%s). Reading its value %r",
        old_flag,
        old,
        flag,
        name,
        legacy,
    )
    return legacy


class LongformerLMDecoder(FairseqIncrementalDecoder):
    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        shape = DecoderShape(
            vocab_size=len(dictionary),
            padding_idx=dictionary.pad(),
            embed_dim=cfg.decoder_embed_dim,
            ffn_dim=cfg.decoder_ffn_embed_dim,
            num_heads=cfg.decoder_attention_heads,
            windows=layer_values(_renamed(cfg, "attention_window", "attention_windows"), cfg.decoder_layers),
            dilations=dilation_pattern(
                _renamed(cfg, "attention_dilation", "attention_dilations"),
                cfg.decoder_layers,
                cfg.decoder_attention_heads,
                cfg.dilated_heads,
            ),
        )
        self.max_target_positions = cfg.max_target_positions
        self.net = LongformerDecoder(
            shape,
            cfg.dropout,
            cfg.attention_dropout,
            cfg.checkpoint_activations,
            cfg.attention_backend,
            bool(safe_getattr(cfg, "compile_layers", False)),
        )

    def forward(self, prev_output_tokens, incremental_state=None, **kwargs):
        """prev_output_tokens: ``(B, T)`` -> logits ``(B, T', V)`` and the blocks' outputs.

        With ``incremental_state`` (generation), the layers' caches live there and only the
        tokens they have not seen are run (all of them at the first call, then the last):
        ``T'`` counts those.
        """
        if incremental_state is None:
            logits, states = self.net(prev_output_tokens)
            return logits, {"attn": None, "inner_states": states}  # no attention weights to show
        caches = self.get_incremental_state(incremental_state, _CACHES)
        if caches is None:
            caches = self.net.new_caches()
            self.set_incremental_state(incremental_state, _CACHES, caches)
        logits, states = self.net(prev_output_tokens[:, caches[0].length :], caches)
        return logits, {"attn": None, "inner_states": states}

    def reorder_incremental_state(self, incremental_state, new_order):
        """Beam search keeps and reorders hypotheses: each layer's cache follows."""
        for cache in self.get_incremental_state(incremental_state, _CACHES) or ():
            cache.reorder(new_order)

    def max_positions(self):
        return self.max_target_positions or int(1e9)


@register_model("longformer_lm", dataclass=LongformerLMConfig)
class LongformerLanguageModel(FromPretrained, FairseqLanguageModel):
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
