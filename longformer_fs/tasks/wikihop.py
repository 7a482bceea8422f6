"""fairseq adapter: the ``longformer_wikihop`` task (paper §6, WikiHop), over ``prep wikihop`` data.

An example is a prefix ``<s> [q] question [/q] [ent] c1 [/ent] ...`` and a context ``</s>
support </s> ...``. A context longer than the model is run in chunks that each repeat the
prefix: chunk k is the prefix and context tokens ``[k L, (k + 1) L)``, ``L = max_positions
- len(prefix)``. The whole prefix (the question and every candidate) gets global
attention. The model's token head ``candidate`` gives one logit per ``[ent]``; the
``longformer_wikihop`` criterion averages each candidate's logits over the chunks
(:func:`~longformer_fs.modules.task_heads.average_over_chunks`) and takes cross-entropy
over the candidates.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..conventions import WIKIHOP_FILES, WIKIHOP_SYMBOLS
from ..heads import CANDIDATE_HEAD
from ..modules.task_heads import average_over_chunks
from .token_head_task import ItemsDataset, TokenHeadTask

ENTITY = WIKIHOP_SYMBOLS[2]  # [ent]: its position stands for its candidate


@dataclass
class WikihopConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "a `longformer-fs prep wikihop` directory"})
    max_positions: int = field(default=4096, metadata={"help": "tokens per chunk (the model's length)"})
    seed: int = field(default=1, metadata={"help": "shuffling seed"})


def chunk(prefix: torch.Tensor, context: torch.Tensor, max_positions: int) -> list[torch.Tensor]:
    """The model inputs of one example: the prefix, then the next piece of context."""
    room = max_positions - len(prefix)
    if room < 1:
        raise ValueError(
            f"max_positions: {max_positions} leaves no room for context after a {len(prefix)}-token "
            "question and candidates"
        )
    return [torch.cat([prefix, context[start : start + room]]) for start in range(0, max(len(context), 1), room)]


class WikihopDataset(ItemsDataset):
    def __init__(self, prefix, context, labels, dictionary: Dictionary, max_positions: int):
        self.prefix, self.context, self.labels = prefix, context, labels
        self.dictionary, self.max_positions = dictionary, max_positions
        self.entity = dictionary.index(ENTITY)
        room = np.maximum(max_positions - np.asarray(prefix.sizes), 1)
        chunks = np.maximum(-(-np.asarray(context.sizes) // room), 1)
        # A chunk fits the model (fairseq's size filter), and a batch costs every chunk.
        self.sizes = np.minimum(np.asarray(prefix.sizes) + np.asarray(context.sizes), max_positions)
        self.costs = chunks * self.sizes

    def __getitem__(self, index):
        prefix = self.prefix[index]
        return {
            "id": index,
            "chunks": chunk(prefix, self.context[index], self.max_positions),
            "prefix_len": len(prefix),
            "candidates": (prefix == self.entity).nonzero()[:, 0],
            "label": int(self.labels[index][0]),
        }

    def collater(self, samples):
        if not samples:
            return {}
        pad = self.dictionary.pad()
        rows = [c for s in samples for c in s["chunks"]]
        owner = torch.tensor([i for i, s in enumerate(samples) for _ in s["chunks"]])
        prefix_len = torch.tensor([s["prefix_len"] for s in samples])
        tokens = data_utils.collate_tokens(rows, pad, left_pad=False)
        global_mask = torch.arange(tokens.shape[1])[None, :] < prefix_len[owner][:, None]
        width = max(len(s["candidates"]) for s in samples)
        candidates = torch.zeros(len(samples), width, dtype=torch.long)
        valid = torch.zeros(len(samples), width, dtype=torch.bool)
        for row, sample in enumerate(samples):
            candidates[row, : len(sample["candidates"])] = sample["candidates"]
            valid[row, : len(sample["candidates"])] = True
        return self.batch(
            samples,
            tokens,
            global_mask,
            owner=owner,
            candidates=candidates,
            candidate_mask=valid,
            target=torch.tensor([s["label"] for s in samples]),
        )


@register_task("longformer_wikihop", dataclass=WikihopConfig)
class WikihopTask(TokenHeadTask):
    prep, head, head_outputs = "wikihop", CANDIDATE_HEAD, 1  # a logit per [ent]
    required_symbols = tuple(WIKIHOP_SYMBOLS)

    @staticmethod
    def model_outputs(model, sample) -> torch.Tensor:
        """``(B, C)`` float32 logits of each example's candidates, the mean of their ``[ent]``
        logits over the example's chunks; -inf where an example has fewer than C."""
        features, _ = model(**sample["net_input"], features_only=True)
        per_token = model.token_logits(CANDIDATE_HEAD, features)[..., 0].float()  # (chunks, T)
        owner = sample["owner"]
        per_chunk = per_token.gather(1, sample["candidates"][owner])  # (chunks, C)
        logits = average_over_chunks(per_chunk, owner, len(sample["target"]))
        return logits.masked_fill(~sample["candidate_mask"], float("-inf"))

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        parts = self.load_parts(split, WIKIHOP_FILES)
        self.datasets[split] = WikihopDataset(
            parts["prefix"], parts["context"], parts["label"], self.dictionary, self.cfg.max_positions
        )
        return self.datasets[split]
