"""fairseq criterions of longformer-fs (registered on import)."""

from .. import components  # noqa: F401, E402  (the rest of the plugin: fairseq may import only this)
from . import bpc_cross_entropy, coref, hotpotqa, qa, wikihop  # noqa: F401
