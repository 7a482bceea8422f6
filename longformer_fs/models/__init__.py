"""fairseq models of longformer-fs (registered on import)."""

from . import led, longformer_lm, longformer_roberta  # noqa: F401
