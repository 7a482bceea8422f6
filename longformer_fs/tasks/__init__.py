"""fairseq tasks of longformer-fs (registered on import)."""

from . import char_lm, coref, hotpotqa, masked_lm, qa, sentence_prediction, translation, wikihop  # noqa: F401
