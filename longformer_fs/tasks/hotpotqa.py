"""fairseq adapter: the ``longformer_hotpotqa`` task (paper §6 and Appendix B), over ``prep hotpotqa`` data.

Every item is one question with its ten paragraphs in one sequence, ``<s> [q] question
[/q] [p] title [s] sentence [s] ... [p] ...``. The batch carries the global-attention mask
(``<s>``, the question with its markers, and every ``[p]`` and ``[s]``), the tokens an
answer may start or end at (sentence text: not titles, not markers), the gold spans, the
question type and the 0/1 evidence labels at each ``[p]`` and ``[s]``. The model gets four
token heads: ``hotpotqa_span`` (start/end logits), ``hotpotqa_type`` (span/yes/no, read at
the first token) and the 2-layer scorers ``hotpotqa_paragraph`` and ``hotpotqa_sentence``
(:class:`~longformer_fs.modules.task_heads.EvidenceScorer`); the ``longformer_hotpotqa``
criterion trains them jointly.

A split prepared from a file without answers (HotpotQA's test set) has only the inputs,
:data:`INPUT_FILES`: its batches carry no labels, and it loads only for prediction
(``load_dataset(split, allow_unlabelled=True)``, as ``eval-hotpotqa`` does).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..conventions import HOTPOTQA_FILES, HOTPOTQA_SYMBOLS
from ..heads import PARAGRAPH_HEAD, SENTENCE_HEAD, SPAN_HEAD, TYPE_HEAD
from ..modules.task_heads import EvidenceScorer
from .qa import QaConfig
from .token_head_task import ItemsDataset, TokenHeadTask

QUESTION_END, PARAGRAPH, SENTENCE = HOTPOTQA_SYMBOLS[1:]  # [/q] [p] [s]
# The datasets of a split's labels, which a split prepared without them lacks, and of its inputs.
LABEL_FILES = ("starts", "ends", "paragraphs", "sentences", "qtype")
INPUT_FILES = tuple(name for name in HOTPOTQA_FILES if name not in LABEL_FILES)


@dataclass
class HotpotqaConfig(QaConfig):
    """The QA task's options, on a HotpotQA directory (one window per question)."""

    data: str = field(default=MISSING, metadata={"help": "a `longformer-fs prep hotpotqa` directory"})


def scatter_labels(markers: torch.Tensor, labels: list[torch.Tensor]) -> torch.Tensor:
    """``(B, T)`` float: row b's ``labels`` placed at its marker tokens, in order (0 elsewhere)."""
    out = torch.zeros(markers.shape, dtype=torch.float32)
    for row, values in enumerate(labels):
        positions = markers[row].nonzero()[:, 0]
        if len(positions) != len(values):
            raise ValueError(f"hotpotqa: {len(positions)} markers but {len(values)} labels; prepare the data again")
        out[row, positions] = values.float()
    return out


class HotpotqaDataset(ItemsDataset):
    """The questions of one split, with their labels when it has them (``labelled``)."""

    def __init__(self, parts: dict, dictionary: Dictionary):
        self.parts, self.dictionary = parts, dictionary
        self.labelled = all(name in parts for name in LABEL_FILES)
        self.ids = {name: dictionary.index(name) for name in (QUESTION_END, PARAGRAPH, SENTENCE)}
        self.sizes = self.costs = np.asarray(parts["tokens"].sizes)

    def __getitem__(self, index):
        item = {name: part[index] for name, part in self.parts.items()}
        item["offsets"] = item["offsets"].view(-1, 2)
        return {"id": index, **item}

    def collater(self, samples):
        if not samples:
            return {}
        pad = self.dictionary.pad()
        tokens = data_utils.collate_tokens([s["tokens"] for s in samples], pad, left_pad=False)
        positions = torch.arange(tokens.shape[1])[None, :]
        question = positions <= (tokens == self.ids[QUESTION_END]).int().argmax(dim=1, keepdim=True)
        paragraphs, sentences = tokens == self.ids[PARAGRAPH], tokens == self.ids[SENTENCE]
        char_starts = data_utils.collate_tokens([s["offsets"][:, 0] for s in samples], -1, left_pad=False)
        labels = self.labels(samples, paragraphs, sentences) if self.labelled else {}
        return self.batch(
            samples,
            tokens,
            question | paragraphs | sentences,
            answer_mask=char_starts >= 0,
            paragraph_mask=paragraphs,
            sentence_mask=sentences,
            **labels,
        )

    @staticmethod
    def labels(samples, paragraphs: torch.Tensor, sentences: torch.Tensor) -> dict:
        """The batch's labels: ``starts``/``ends`` ``(B, K)`` (-1 padded), ``qtype`` ``(B,)``,
        and the 0/1 ``paragraph_labels``/``sentence_labels`` ``(B, T)`` at the ``[p]``/``[s]``
        tokens that ``paragraphs``/``sentences`` (``(B, T)`` bool) mark."""
        width = max(1, max(len(s["starts"]) for s in samples))
        starts, ends = (torch.full((len(samples), width), -1, dtype=torch.long) for _ in range(2))
        for row, sample in enumerate(samples):
            starts[row, : len(sample["starts"])] = sample["starts"]
            ends[row, : len(sample["ends"])] = sample["ends"]
        return {
            "starts": starts,
            "ends": ends,
            "qtype": torch.cat([s["qtype"] for s in samples]).long(),
            "paragraph_labels": scatter_labels(paragraphs, [s["paragraphs"] for s in samples]),
            "sentence_labels": scatter_labels(sentences, [s["sentences"] for s in samples]),
        }


@register_task("longformer_hotpotqa", dataclass=HotpotqaConfig)
class HotpotqaTask(TokenHeadTask):
    prep, head, head_outputs = "hotpotqa", SPAN_HEAD, 2
    required_symbols = tuple(HOTPOTQA_SYMBOLS)

    def token_heads(self, model) -> dict:
        return {
            SPAN_HEAD: 2,  # start and end logits
            TYPE_HEAD: 3,  # span / yes / no, read at the first token
            PARAGRAPH_HEAD: EvidenceScorer(model.embed_dim),
            SENTENCE_HEAD: EvidenceScorer(model.embed_dim),
        }

    @staticmethod
    def model_outputs(model, sample) -> tuple:
        """The four heads' float32 logits: span ``(B, T, 2)``, type ``(B, 3)``, paragraph and
        sentence ``(B, T)``."""
        features, _ = model(**sample["net_input"], features_only=True)
        return (
            model.token_logits(SPAN_HEAD, features).float(),
            model.token_logits(TYPE_HEAD, features[:, 0]).float(),
            model.token_logits(PARAGRAPH_HEAD, features)[..., 0].float(),
            model.token_logits(SENTENCE_HEAD, features)[..., 0].float(),
        )

    def load_dataset(self, split, epoch=1, combine=False, allow_unlabelled=False, **kwargs):
        """Load ``split``; one prepared without labels only with ``allow_unlabelled`` (to
        predict it): training and validation need them."""
        parts = self.load_parts(split, INPUT_FILES)
        if Path(self.cfg.data, f"{split}.qtype.idx").is_file():  # load_parts names any other one missing
            parts |= self.load_parts(split, LABEL_FILES)
        elif not allow_unlabelled:
            raise ValueError(
                f"{split}: {self.cfg.data} holds it without labels (prepared from a file without answers, as "
                "HotpotQA's test set): predict it with eval-hotpotqa; train and validate on labelled splits"
            )
        longest = int(np.max(parts["tokens"].sizes)) if len(parts["tokens"]) else 0
        if longest > self.cfg.max_positions:
            raise ValueError(
                f"{split}: sequences of up to {longest} tokens exceed task.max_positions="
                f"{self.cfg.max_positions}; prepare the data with --max-tokens {self.cfg.max_positions}"
            )
        self.datasets[split] = HotpotqaDataset(parts, self.dictionary)
        return self.datasets[split]
