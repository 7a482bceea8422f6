"""fairseq adapter: the ``longformer_masked_lm`` task, fairseq's ``masked_lm`` with rows that
pack whole documents (``--pack-documents``).

``masked_lm`` cuts a corpus into blocks in one of two ways, each with a cost: ``complete``
fills every block but lets the band attend across documents (RoBERTa's FULL-SENTENCES), and
``complete_doc`` keeps each block inside a document (DOC-SENTENCES, which RoBERTa's paper
found slightly better) but leaves short documents' blocks mostly padding. With
``pack_documents``, the ``complete_doc`` blocks (each with its ``<s>``) are packed into rows of
``tokens_per_sample``, first-fit by length (:mod:`.packed_documents`), and every row carries
its documents' ids as ``net_input["documents"]``: each document is attended, and numbered,
as if it were alone. Without it the task is fairseq's ``masked_lm``.
"""

import contextlib
from dataclasses import dataclass, field

from fairseq.data import IdDataset, NestedDictionaryDataset, NumelDataset, NumSamplesDataset, RightPadDataset
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask
from omegaconf import DictConfig, open_dict

from .packed_documents import PADDED_DOCUMENT, DocumentIdsDataset, MaxDocumentsDataset, PackedDocumentsDataset


@dataclass
class LongformerMaskedLMConfig(MaskedLMConfig):
    pack_documents: bool = field(
        default=False,
        metadata={
            "help": "pack whole documents into rows of tokens_per_sample (first-fit by length; a document "
            "longer than a row is split at the row's length, as complete_doc does), each attended and "
            "numbered alone: no padding as with complete_doc, no attention across documents as with "
            "complete (sample_break_mode is then complete_doc)"
        },
    )


@register_task("longformer_masked_lm", dataclass=LongformerMaskedLMConfig)
class LongformerMaskedLMTask(MaskedLMTask):
    """fairseq's ``masked_lm``, whose rows may pack whole documents (this module)."""

    cfg: LongformerMaskedLMConfig

    def __init__(self, cfg: LongformerMaskedLMConfig, dictionary=None):
        if cfg.pack_documents:  # the items packed are the blocks that stay in one document
            with open_dict(cfg) if isinstance(cfg, DictConfig) else contextlib.nullcontext():
                cfg.sample_break_mode = "complete_doc"
        super().__init__(cfg, dictionary)
        self._packing: PackedDocumentsDataset | None = None

    def _load_dataset_split(self, split, epoch, combine):
        pieces = super()._load_dataset_split(split, epoch, combine)  # complete_doc blocks with <s>
        if not self.cfg.pack_documents:
            return pieces
        packed = PackedDocumentsDataset(pieces, pieces.sizes, self.cfg.tokens_per_sample, self.source_dictionary.bos())
        self._packing = packed  # for _regular_dataset, which load_dataset calls next
        return packed

    def _regular_dataset(self, src_dataset, target_dataset):
        """fairseq's, with the rows' document ids in ``net_input`` when packed."""
        if not self.cfg.pack_documents:
            return super()._regular_dataset(src_dataset, target_dataset)
        pad = self.source_dictionary.pad()
        input_dict = {
            "src_tokens": RightPadDataset(src_dataset, pad_idx=pad),
            "src_lengths": NumelDataset(src_dataset, reduce=False),
            "documents": RightPadDataset(DocumentIdsDataset(self._packing), pad_idx=PADDED_DOCUMENT),
            "max_documents": MaxDocumentsDataset(self._packing),
        }
        if self.cfg.include_target_tokens:
            input_dict["target_tokens"] = target_dataset
        if self.cfg.include_index:
            input_dict["src_id"] = IdDataset()
        return NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": input_dict,
                "target": target_dataset,
                "nsentences": NumSamplesDataset(),
                "ntokens": NumelDataset(src_dataset, reduce=True),
            },
            sizes=[src_dataset.sizes],
        )
