"""fairseq adapter: the ``longformer_qa`` task (paper §6, TriviaQA), over ``prep qa`` data.

Every item is one window ``<s> question </s> document part </s>``. The batch carries a
per-example global-attention mask (``<s>`` and every question token: everything before
the first ``</s>``), the document tokens (where an answer may start or end) and every
gold start and end of the window. The model gets a token head ``qa`` with 2 outputs
(start and end logits); the ``longformer_qa`` criterion trains it with the OR loss.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..conventions import QA_FILES
from ..heads import QA_HEAD
from .token_head_task import ItemsDataset, TokenHeadTask

# The datasets of a `prep qa` split: each window's tokens and gold positions, which batches
# carry, and its tokens' character offsets, which only prediction reads.
*WINDOW_FILES, OFFSETS = QA_FILES


@dataclass
class QaConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "a `longformer-fs prep qa` directory"})
    max_positions: int = field(default=4096, metadata={"help": "the longest window the model takes"})
    max_answer_tokens: int = field(default=30, metadata={"help": "the longest answer predicted, in tokens"})
    seed: int = field(default=1, metadata={"help": "shuffling seed"})


def question_mask(tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """``(B, T)`` bool: ``<s>`` and the question, everything before each row's first ``</s>``."""
    first_eos = (tokens == eos).int().argmax(dim=1, keepdim=True)
    return torch.arange(tokens.shape[1], device=tokens.device)[None, :] < first_eos


class QaDataset(ItemsDataset):
    """The windows of one split, with their gold positions."""

    def __init__(self, tokens, starts, ends, dictionary: Dictionary):
        self.tokens, self.starts, self.ends = tokens, starts, ends
        self.dictionary = dictionary
        self.sizes = self.costs = np.asarray(tokens.sizes)

    def __getitem__(self, index):
        return {"id": index, "source": self.tokens[index], "starts": self.starts[index], "ends": self.ends[index]}

    def collater(self, samples):
        if not samples:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        tokens = data_utils.collate_tokens([s["source"] for s in samples], pad, left_pad=False)
        question = question_mask(tokens, eos)
        document = ~question & (tokens != pad) & (tokens != eos)
        width = max(1, max(len(s["starts"]) for s in samples))
        starts, ends = (torch.full((len(samples), width), -1, dtype=torch.long) for _ in range(2))
        for row, sample in enumerate(samples):
            starts[row, : len(sample["starts"])] = sample["starts"]
            ends[row, : len(sample["ends"])] = sample["ends"]
        return self.batch(samples, tokens, question, document_mask=document, starts=starts, ends=ends)


@register_task("longformer_qa", dataclass=QaConfig)
class QaTask(TokenHeadTask):
    prep, head, head_outputs = "qa", QA_HEAD, 2  # start and end logits

    @staticmethod
    def model_outputs(model, sample) -> torch.Tensor:
        """``(B, T, 2)`` float32: the start and end logits of every token of the batch's windows."""
        features, _ = model(**sample["net_input"], features_only=True)
        return model.token_logits(QA_HEAD, features).float()

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        parts = self.load_parts(split, WINDOW_FILES)
        longest = int(np.max(parts["tokens"].sizes)) if len(parts["tokens"]) else 0
        if longest > self.cfg.max_positions:
            raise ValueError(
                f"{split}: windows of up to {longest} tokens exceed task.max_positions="
                f"{self.cfg.max_positions}; prepare the data with --max-tokens {self.cfg.max_positions}"
            )
        self.datasets[split] = QaDataset(parts["tokens"], parts["starts"], parts["ends"], self.dictionary)
        return self.datasets[split]

    def windows(self, split: str) -> list[dict]:
        """``{split}.windows.jsonl``: per window its example id, window index and question length."""
        return self.jsonl(split, "windows")

    def offsets(self, split: str):
        """``{split}.offsets``: per window, 2 context characters per token (-1 outside the document)."""
        return self.load_parts(split, (OFFSETS,))[OFFSETS]
