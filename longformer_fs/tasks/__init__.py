"""fairseq tasks of longformer-fs (registered on import)."""

from . import char_lm, coref, hotpotqa, multiple_choice, question_answering  # noqa: F401
