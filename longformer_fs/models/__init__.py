"""fairseq models of longformer-fs (registered on import)."""

from .. import components  # noqa: F401, E402  (the rest of the plugin: fairseq may import only this)
from . import led, longformer_lm, longformer_roberta  # noqa: F401
