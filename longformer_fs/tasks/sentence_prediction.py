"""fairseq adapter: the ``longformer_sentence_prediction`` task, fairseq's ``sentence_prediction``
whose rows may pack whole documents (``--pack``, issue #75).

fairseq's task pads every row of a batch to its longest, and shuffles without regard to
length, so a batch of one long review and three short ones runs four long rows. With
``pack``, each split's inputs (``<s>`` document, truncated to ``max_positions`` as
``--shorten-method truncate`` does) are packed first-fit into rows of ``max_positions``
(:mod:`.packed_documents`), the rows shuffled. A batch then carries, besides fairseq's
fields, each row's document ids and the most documents a row holds, for the model (each
document attended, numbered and given its global ``<s>`` alone), and each document's first
token (``document_starts``), where the classification head reads it. Its ``target`` and
``nsentences`` are per document, so fairseq's ``sentence_prediction`` criterion, its
accuracy and F1 included, counts documents as it does unpacked. Without ``pack`` the task is
fairseq's ``sentence_prediction``.
"""

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import (
    FairseqDataset,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
)
from fairseq.tasks import register_task
from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask
from omegaconf import DictConfig, open_dict

from .packed_documents import PADDED_DOCUMENT, DocumentIdsDataset, MaxDocumentsDataset, PackedDocumentsDataset


@dataclass
class LongformerSentencePredictionConfig(SentencePredictionConfig):
    pack: bool = field(
        default=False,
        metadata={
            "help": "pack whole inputs into rows of max_positions tokens (first-fit by length), each attended, "
            "numbered and classified alone: a batch is batch_size full rows, not batch_size rows padded to the "
            "longest; the loss, accuracy and F1 stay per document"
        },
    )


class RowField(FairseqDataset):
    """A per-document field of packed rows (each document's label, or its first token):
    ``field(row_items)`` for a row's items in order, then its collater (below)."""

    def __init__(self, packed: PackedDocumentsDataset, field_of):
        super().__init__()
        self.packed, self.field_of = packed, field_of

    def __getitem__(self, index: int):
        return self.field_of(index)

    def __len__(self) -> int:
        return len(self.packed)


class RowTargets(RowField):
    """The labels of a row's documents, in the row's order; a batch's, concatenated: ``(N,)``."""

    def __init__(self, packed: PackedDocumentsDataset, labels):
        super().__init__(packed, lambda index: torch.cat([labels[i] for i in packed.items(index)]))

    def collater(self, samples):
        return torch.cat(samples)


class RowStarts(RowField):
    """Each document's first token as a flat index into the batch's right-padded ``B x T``
    positions: ``(N,)`` long, documents in row order."""

    def __init__(self, packed: PackedDocumentsDataset):
        super().__init__(packed, lambda index: packed.item_sizes[index])

    def collater(self, samples):
        width = max(int(sizes.sum()) for sizes in samples)
        starts = [row * width + np.concatenate([[0], np.cumsum(sizes)[:-1]]) for row, sizes in enumerate(samples)]
        return torch.from_numpy(np.concatenate(starts)).long()


class RowDocuments(RowField):
    """The documents of a batch's rows, counted: the batch's ``nsentences``."""

    def __init__(self, packed: PackedDocumentsDataset):
        super().__init__(packed, lambda index: len(packed.rows[index]))

    def collater(self, samples):
        return sum(samples)


@register_task("longformer_sentence_prediction", dataclass=LongformerSentencePredictionConfig)
class LongformerSentencePredictionTask(SentencePredictionTask):
    """fairseq's ``sentence_prediction``, whose rows may pack whole inputs (this module)."""

    cfg: LongformerSentencePredictionConfig

    def __init__(self, cfg, data_dictionary, label_dictionary):
        if cfg.pack and cfg.regression_target:
            raise ValueError("pack: packs classification inputs; regression targets are not packed")
        if cfg.pack and cfg.shorten_method == "none":  # each input one document of a row, none cut in two
            with open_dict(cfg) if isinstance(cfg, DictConfig) else contextlib.nullcontext():
                cfg.shorten_method = "truncate"
        super().__init__(cfg, data_dictionary, label_dictionary)

    def load_dataset(self, split, combine=False, **kwargs):
        dataset = super().load_dataset(split, combine=combine, **kwargs)
        if not self.cfg.pack:
            return dataset
        # fairseq's dataset (shuffled by a SortDataset): each input's fields, by flattened name.
        unpacked = (dataset.dataset if isinstance(dataset, SortDataset) else dataset).defn
        source = unpacked["net_input.src_tokens"]
        packed = PackedDocumentsDataset(source, source.sizes, self.cfg.max_positions, self.source_dictionary.bos())
        fields = {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": RightPadDataset(packed, pad_idx=self.source_dictionary.pad()),
                "src_lengths": NumelDataset(packed, reduce=False),
                "documents": RightPadDataset(DocumentIdsDataset(packed), pad_idx=PADDED_DOCUMENT),
                "max_documents": MaxDocumentsDataset(packed),
                "document_starts": RowStarts(packed),
            },
            "target": RowTargets(packed, unpacked["target"]),
            "nsentences": RowDocuments(packed),
            "ntokens": NumelDataset(packed, reduce=True),
        }
        rows = NestedDictionaryDataset(fields, sizes=[packed.sizes])
        with data_utils.numpy_seed(self.cfg.seed):
            shuffle = np.random.permutation(len(rows))
        self.datasets[split] = rows if self.cfg.no_shuffle else SortDataset(rows, sort_order=[shuffle])
        return self.datasets[split]
