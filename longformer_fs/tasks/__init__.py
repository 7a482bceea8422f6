"""fairseq tasks of longformer-fs (registered on import)."""

from . import char_lm  # noqa: F401
