"""fairseq models of longformer-fs (registered on import)."""

from . import longformer_lm  # noqa: F401
