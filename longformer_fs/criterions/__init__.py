"""fairseq criterions of longformer-fs (registered on import)."""

from . import bpc_cross_entropy, coref, hotpotqa, qa, wikihop  # noqa: F401
