"""fairseq criterions of longformer-fs (registered on import)."""

from . import bpc_cross_entropy  # noqa: F401
