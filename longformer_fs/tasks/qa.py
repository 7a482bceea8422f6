"""fairseq adapter: the ``longformer_qa`` task (paper §6, TriviaQA), over ``prep qa`` data.

Every item is one window ``<s> question </s> document part </s>``. The batch carries a
per-example global-attention mask (``<s>`` and every question token: everything before
the first ``</s>``), the document tokens (where an answer may start or end) and every
gold start and end of the window. The model gets a token head ``qa`` with 2 outputs
(start and end logits); the ``longformer_qa`` criterion trains it with the OR loss.

With ``pack`` (issue #75), windows are packed first-fit into rows of ``max_positions``
(:mod:`.packed_documents`): each window is a document of its row, attended, numbered and
given its question as global tokens alone, and the loss stays per window
(:meth:`QaTask.window_spans`). Evaluation reads windows one by one, unpacked.
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
from .packed_documents import PADDED_DOCUMENT, PackedDocumentsDataset, document_bound
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
    pack: bool = field(
        default=False,
        metadata={
            "help": "pack whole windows into rows of max_positions tokens (first-fit by length), each attended, "
            "numbered and given its question's global attention alone: a batch is batch_size full rows, not "
            "batch_size windows padded to the longest; the loss and span accuracy stay per window"
        },
    )


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


class PackedQaDataset(ItemsDataset):
    """The windows of one split packed into rows of ``capacity`` tokens, each a document of
    its row. A batch holds, besides what :class:`QaDataset`'s holds for its rows, each row's
    document ids and the most windows a row holds (``M``, a multiple of
    :data:`~.packed_documents.DOCUMENT_SLOTS`), and the gold positions per window slot:
    ``starts``/``ends`` ``(B * M, K)``, row ``b * M + m`` for the ``m``-th window of row
    ``b``, in the row's positions (-1 pads, and fills the slots of windows a row lacks)."""

    def __init__(self, windows: QaDataset, capacity: int):
        self.windows, self.dictionary = windows, windows.dictionary
        self.packed = PackedDocumentsDataset(windows.tokens, windows.sizes, capacity, windows.dictionary.bos())
        self.sizes = self.costs = self.packed.sizes

    def __getitem__(self, index):
        items = [self.windows[i] for i in self.packed.items(index)]
        eos = self.dictionary.eos()
        offsets = np.concatenate([[0], np.cumsum([len(item["source"]) for item in items])[:-1]])
        return {
            "id": index,
            "source": torch.cat([item["source"] for item in items]),
            # Each window's question: its tokens before its own first </s>.
            "question": torch.cat([question_mask(item["source"][None], eos)[0] for item in items]),
            "documents": self.packed.documents(index),
            "starts": [item["starts"] + int(offset) for item, offset in zip(items, offsets, strict=True)],
            "ends": [item["ends"] + int(offset) for item, offset in zip(items, offsets, strict=True)],
        }

    def collater(self, samples):
        if not samples:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        tokens = data_utils.collate_tokens([s["source"] for s in samples], pad, left_pad=False)
        question = data_utils.collate_tokens([s["question"] for s in samples], False, left_pad=False)
        documents = data_utils.collate_tokens([s["documents"] for s in samples], PADDED_DOCUMENT, left_pad=False)
        document = ~question & (tokens != pad) & (tokens != eos)
        slots = document_bound(max(len(s["starts"]) for s in samples))
        width = max(1, max(len(gold) for s in samples for gold in s["starts"]))
        starts, ends = (torch.full((len(samples) * slots, width), -1, dtype=torch.long) for _ in range(2))
        for row, sample in enumerate(samples):
            for slot, (start, end) in enumerate(zip(sample["starts"], sample["ends"], strict=True)):
                starts[row * slots + slot, : len(start)] = start
                ends[row * slots + slot, : len(end)] = end
        batch = self.batch(samples, tokens, question, document_mask=document, starts=starts, ends=ends)
        batch["net_input"].update(documents=documents, max_documents=slots)
        batch["nsentences"] = sum(len(s["starts"]) for s in samples)  # windows, as unpacked
        return batch


@register_task("longformer_qa", dataclass=QaConfig)
class QaTask(TokenHeadTask):
    prep, head, head_outputs = "qa", QA_HEAD, 2  # start and end logits

    @staticmethod
    def model_outputs(model, sample) -> torch.Tensor:
        """``(B, T, 2)`` float32: the start and end logits of every token of the batch's windows."""
        features, _ = model(**sample["net_input"], features_only=True)
        return model.token_logits(QA_HEAD, features).float()

    @classmethod
    def window_spans(cls, model, sample) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the OR loss reads, one row per window: its start and end logits ``(W, T, 2)``,
        gold ``starts`` and ``ends`` ``(W, K)`` and the ``allowed`` tokens ``(W, T)`` bool.
        Unpacked, ``W = B``. In packed rows ``W = B * M``, each row's logits repeated for its
        ``M`` window slots and each slot allowed only its own window's document tokens, so
        every softmax runs over one window (a slot a row lacks allows nothing and has no
        gold)."""
        logits, allowed = cls.model_outputs(model, sample), sample["document_mask"]
        documents = sample["net_input"].get("documents")
        if documents is not None:
            batch, length, slots = *documents.shape, sample["net_input"]["max_documents"]
            own = documents[:, None, :] == torch.arange(slots, device=documents.device)[None, :, None]
            allowed = (allowed[:, None, :] & own).reshape(batch * slots, length)
            logits = logits[:, None].expand(batch, slots, length, 2).reshape(batch * slots, length, 2)
        return logits, sample["starts"], sample["ends"], allowed

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        parts = self.load_parts(split, WINDOW_FILES)
        longest = int(np.max(parts["tokens"].sizes)) if len(parts["tokens"]) else 0
        if longest > self.cfg.max_positions:
            raise ValueError(
                f"{split}: windows of up to {longest} tokens exceed task.max_positions="
                f"{self.cfg.max_positions}; prepare the data with --max-tokens {self.cfg.max_positions}"
            )
        windows = QaDataset(parts["tokens"], parts["starts"], parts["ends"], self.dictionary)
        self.datasets[split] = PackedQaDataset(windows, self.cfg.max_positions) if self.cfg.pack else windows
        return self.datasets[split]

    def windows(self, split: str) -> list[dict]:
        """``{split}.windows.jsonl``: per window its example id, window index and question length."""
        return self.jsonl(split, "windows")

    def offsets(self, split: str):
        """``{split}.offsets``: per window, 2 context characters per token (-1 outside the document)."""
        return self.load_parts(split, (OFFSETS,))[OFFSETS]
