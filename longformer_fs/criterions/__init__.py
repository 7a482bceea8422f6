"""fairseq criterions of longformer-fs (registered on import)."""

from . import bpc_cross_entropy, coref, hotpotqa, multiple_choice, question_answering  # noqa: F401
