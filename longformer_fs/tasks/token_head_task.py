"""The shared shape of the fine-tuning tasks over ``longformer-fs prep`` directories whose
model gets a token head and takes its global attention from the batch (``longformer_qa``,
``longformer_wikihop``).

A subclass names its ``prep`` command (for error messages) and its head and the head's
outputs, or several heads through :meth:`token_heads`; it reads a split's files with
:meth:`load_parts` and builds its dataset; and :meth:`model_outputs` runs the model on a
batch, the one place its criterion and its evaluation both call.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils
from fairseq.tasks import FairseqTask
from omegaconf import OmegaConf, open_dict

GLOBAL_SLOTS = 8  # global slots are counted in multiples of this: fewer shapes for a compiled model


def global_slots(global_mask: torch.Tensor) -> int:
    """The most global tokens a row of ``global_mask`` ``(B, T)`` marks, rounded up to
    :data:`GLOBAL_SLOTS`: a bound that the model's layers take instead of reading the
    count back from the device. Counted here, on the host, where the batch is made."""
    most = int(global_mask.sum(dim=1).max()) if global_mask.numel() else 0
    return max(GLOBAL_SLOTS, -(-most // GLOBAL_SLOTS) * GLOBAL_SLOTS)


class ItemsDataset(FairseqDataset):
    """A token-head task's dataset: one item per index. Subclasses set ``sizes`` (each
    item's longest model input) and ``costs`` (the tokens a batch pays for the item);
    items are ordered cheapest first."""

    sizes: np.ndarray
    costs: np.ndarray

    def __len__(self):
        return len(self.sizes)

    def num_tokens(self, index):
        return int(self.costs[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        return np.argsort(self.costs, kind="mergesort")

    def batch(self, samples, tokens, global_mask, **fields) -> dict:
        """A batch of ``samples``: their ids and counts, the model input (``tokens``, padded
        with the dictionary's pad, ``global_mask`` and the most global tokens it marks in a
        row), then the task's ``fields``."""
        net_input = {"src_tokens": tokens, "global_attention_mask": global_mask}
        if global_mask is not None:
            net_input["max_global_tokens"] = global_slots(global_mask)
        return {
            "id": torch.tensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": int((tokens != self.dictionary.pad()).sum()),
            "net_input": net_input,
            **fields,
        }


class TokenHeadTask(FairseqTask):
    prep: str  # the `longformer-fs prep` command that makes the data
    head: str  # the token head's name in the model (and in its checkpoints)
    head_outputs: int  # logits per token
    required_symbols: tuple[str, ...] = ()  # symbols dict.txt must hold
    global_attention_from_data = True  # the batches mark the global tokens (not coreference's)

    def __init__(self, cfg, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        path = Path(cfg.data) / "dict.txt"
        if not path.is_file():
            raise FileNotFoundError(
                f"task.data: {path} not found; prepare the data with `longformer-fs prep {cls.prep}`"
            )
        dictionary = Dictionary.load(str(path))
        missing = [s for s in cls.required_symbols if dictionary.index(s) == dictionary.unk()]
        if missing:
            raise ValueError(
                f"task.data: {path} lacks {missing}; prepare the data with `longformer-fs prep {cls.prep}`"
            )
        dictionary.add_symbol("<mask>")  # RoBERTa's embeddings have it, after dict.txt
        return cls(cfg, dictionary)

    def load_parts(self, split: str, names: tuple[str, ...]) -> dict:
        """``{name: the mmap dataset {split}.{name}}``; a clear error for a missing one."""
        prefix = Path(self.cfg.data) / split
        parts = {}
        for name in names:
            parts[name] = data_utils.load_indexed_dataset(f"{prefix}.{name}", None, "mmap")
            if parts[name] is None:
                raise FileNotFoundError(f"task.data: {prefix}.{name}.bin/.idx not found (a prep {self.prep} split)")
        return parts

    def jsonl(self, split: str, name: str) -> list[dict]:
        """``{split}.{name}.jsonl`` as ``prep`` wrote it, one dict per line."""
        path = Path(self.cfg.data) / f"{split}.{name}.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def examples(self, split: str) -> list[dict]:
        """``{split}.examples.jsonl``: one dict per example (ids, answers, candidates)."""
        return self.jsonl(split, "examples")

    def build_model(self, cfg, from_checkpoint=False):
        # This task's batches mark the global tokens: say so through the model's declared
        # --global-attention-from-data, which user commands and configs need not repeat.
        # open_dict: a Hydra or checkpoint config written before the flag lacks the key.
        if self.global_attention_from_data:
            with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.nullcontext():
                cfg.global_attention_from_data = True
        model = super().build_model(cfg, from_checkpoint)
        if not hasattr(model, "register_token_head"):
            raise ValueError(f"model: {type(model).__name__} has no token heads; use --arch longformer_roberta_*")
        for name, head in self.token_heads(model).items():
            model.register_token_head(name, head)
        return model

    @staticmethod
    def model_outputs(model, sample):
        """The model run on a batch of this task, as its criterion trains on it and
        ``longformer_fs.evaluation`` predicts from it: the task's own outputs (logits of
        its heads, per token, candidate or span). Each task says what it returns."""
        raise NotImplementedError

    def token_heads(self, model) -> dict:
        """The heads this task's criterion reads: ``{name: outputs per token, or a module}``
        (``model.embed_dim`` is the features' width)."""
        return {self.head: self.head_outputs}

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
