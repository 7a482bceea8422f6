"""fairseq adapter: the ``longformer_char_lm`` task.

fairseq's language-modeling task over a byte stream made by ``longformer-fs prep``: no
sentence breaks (``sample_break_mode=none``), blocks of ``tokens_per_sample``
characters, each predicting the next character.
"""

from dataclasses import dataclass, field

import numpy as np
from fairseq.data import (
    AppendTokenDataset,
    IdDataset,
    ListDataset,
    NestedDictionaryDataset,
    NumelDataset,
    PadDataset,
    PrependTokenDataset,
    StripTokenDataset,
)
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
    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        """Prompts for generation, each one item: ``</s> prompt`` as the source (its final
        ``</s>`` taken off), the target padded, as fairseq's language-modeling task makes
        them. fairseq's own builds a ``TokenBlockDataset`` in ``eos`` mode, one block an
        item, whose code needs ``np.compat``, which numpy 2 removed."""
        dictionary = self.source_dictionary
        prompts = StripTokenDataset(ListDataset(src_tokens, np.asarray(src_lengths)), dictionary.eos())
        source = PrependTokenDataset(prompts, token=dictionary.eos())
        target = AppendTokenDataset(prompts, token=dictionary.pad())
        return NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "src_tokens": PadDataset(source, pad_idx=dictionary.pad(), left_pad=False),
                    "src_lengths": NumelDataset(source, reduce=False),
                },
                "target": PadDataset(target, pad_idx=dictionary.pad(), left_pad=False),
            },
            sizes=[np.asarray(src_lengths)],
        )
