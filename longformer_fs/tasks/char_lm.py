"""fairseq adapter: the ``longformer_char_lm`` task.

fairseq's language-modeling task over a byte stream made by ``longformer-fs prep``: no
sentence breaks (``sample_break_mode=none``), blocks of ``tokens_per_sample``
characters, each predicting the next character.
"""

from dataclasses import dataclass, field

from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask


@dataclass
class CharLMConfig(LanguageModelingConfig):
    sample_break_mode: str = field(
        default="none", metadata={"help": "'none': the split is one stream cut into tokens_per_sample blocks"}
    )
    tokens_per_sample: int = field(default=2048, metadata={"help": "characters per training sequence"})


@register_task("longformer_char_lm", dataclass=CharLMConfig)
class CharLMTask(LanguageModelingTask):
    pass
