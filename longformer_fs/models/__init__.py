"""fairseq models of longformer-fs (registered on import)."""

from . import longformer_lm, longformer_roberta  # noqa: F401
