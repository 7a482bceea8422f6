"""fairseq adapter: the ``longformer_translation`` task, fairseq's ``translation`` whose
training rows may pack several (source, target) pairs (``--pack``, issue #75), for LED.

fairseq's task pads every source of a batch to its longest: a 3,000-token article batched
with a 16,000-token one runs as two 16K rows through the encoder. With ``pack``, each
split's pairs are packed first-fit by source length into rows of ``max_source_positions``
source tokens (:func:`.packed_documents.first_fit`), and their targets, in the same order,
into the row's target: the positions restart in each target, so a target row may be longer
than ``max_target_positions`` while each target stays within it. A batch then carries,
besides fairseq's fields, the document ids of the sources and of the targets and the most
pairs a row holds; the LED model (:class:`~longformer_fs.models.led.LEDModel`) encodes each
source alone and decodes each target alone, against its own source. ``target`` and
``ntokens`` are fairseq's (the target tokens), and ``nsentences`` counts pairs, so fairseq's
``label_smoothed_cross_entropy``, whose loss is per target token, trains as it does unpacked
(it logs rows as ``bsz``; ``--sentence-avg``, which would average over rows, is refused).
Without ``pack`` the task is fairseq's ``translation``.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from .packed_documents import PADDED_DOCUMENT, document_bound, first_fit


@dataclass
class LongformerTranslationConfig(TranslationConfig):
    pack: bool = field(
        default=False,
        metadata={
            "help": "pack whole (source, target) pairs into rows of max_source_positions source tokens (first-fit "
            "by source length), each source encoded alone and each target decoded alone against its own source: a "
            "batch is batch_size full rows, not batch_size pairs padded to the longest source"
        },
    )


class PackedPairsDataset(FairseqDataset):
    """The pairs of a fairseq ``LanguagePairDataset`` packed into rows of at most
    ``capacity`` source tokens, their targets in the same order.

    Args:
        pairs: fairseq's dataset (its ``src``, ``tgt`` and their sizes).
        capacity: source tokens per row (``max_source_positions``).
    """

    def __init__(self, pairs, capacity: int):
        super().__init__()
        if pairs.tgt is None:
            raise ValueError("pack: packs (source, target) pairs; this split has no targets")
        longest = int(pairs.src_sizes.max()) if len(pairs.src_sizes) else 0
        if longest > capacity:
            raise ValueError(
                f"pack: a source of {longest} tokens exceeds max_source_positions={capacity}; "
                "set truncate_source (--truncate-source) to cut sources to it"
            )
        self.pairs, self.pad, self.eos = pairs, pairs.src_dict.pad(), pairs.eos
        self.rows = first_fit(pairs.src_sizes, capacity)
        self.src_sizes = np.array([int(pairs.src_sizes[row].sum()) for row in self.rows], dtype=np.int64)
        self.tgt_sizes = np.array([int(pairs.tgt_sizes[row].sum()) for row in self.rows], dtype=np.int64)
        # A row's longest target: what the decoder's positions must reach.
        self.longest_targets = np.array([int(pairs.tgt_sizes[row].max()) for row in self.rows], dtype=np.int64)

    def __getitem__(self, index: int) -> dict:
        sources = [self.pairs.src[int(i)] for i in self.rows[index]]
        targets = [self.pairs.tgt[int(i)] for i in self.rows[index]]

        def ids(parts):
            return torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([len(p) for p in parts]))

        # fairseq's teacher forcing, per target: </s> first, then the target less its last token.
        shifted = [torch.cat([target.new_tensor([self.eos]), target[:-1]]) for target in targets]
        return {
            "id": index,
            "source": torch.cat(sources),
            "target": torch.cat(targets),
            "prev_output_tokens": torch.cat(shifted),
            "documents": ids(sources),
            "target_documents": ids(targets),
            "pairs": len(sources),
        }

    def collater(self, samples: list[dict]) -> dict:
        if not samples:
            return {}

        def pad(key, value):
            return data_utils.collate_tokens([s[key] for s in samples], value, left_pad=False)

        target = pad("target", self.pad)
        return {
            "id": torch.tensor([s["id"] for s in samples]),
            "nsentences": sum(s["pairs"] for s in samples),
            "ntokens": int(target.ne(self.pad).sum()),
            "net_input": {
                "src_tokens": pad("source", self.pad),
                "src_lengths": torch.tensor([len(s["source"]) for s in samples]),
                "prev_output_tokens": pad("prev_output_tokens", self.pad),
                "documents": pad("documents", PADDED_DOCUMENT),
                "target_documents": pad("target_documents", PADDED_DOCUMENT),
                "max_documents": document_bound(max(s["pairs"] for s in samples)),
            },
            "target": target,
        }

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def sizes(self) -> np.ndarray:
        return self.src_sizes

    def num_tokens(self, index: int) -> int:
        return int(max(self.src_sizes[index], self.tgt_sizes[index]))

    def size(self, index: int) -> tuple[int, int]:
        """The source row's length and its longest target: what fairseq holds to
        ``max_positions``."""
        return int(self.src_sizes[index]), int(self.longest_targets[index])

    def ordered_indices(self) -> np.ndarray:
        # As fairseq's LanguagePairDataset: shuffled (under the epoch's numpy seed), then
        # sorted by length, so a batch's rows are alike.
        indices = np.random.permutation(len(self))
        indices = indices[np.argsort(self.tgt_sizes[indices], kind="mergesort")]
        return indices[np.argsort(self.src_sizes[indices], kind="mergesort")]

    @property
    def supports_prefetch(self) -> bool:
        return False


@register_task("longformer_translation", dataclass=LongformerTranslationConfig)
class LongformerTranslationTask(TranslationTask):
    """fairseq's ``translation``, whose rows may pack whole pairs (this module)."""

    cfg: LongformerTranslationConfig

    def build_criterion(self, cfg, from_checkpoint=False):
        if self.cfg.pack and getattr(cfg, "sentence_avg", False):
            raise ValueError("pack: --sentence-avg would average the loss over rows, not pairs; train per token")
        return super().build_criterion(cfg, from_checkpoint)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.cfg.pack:
            self.datasets[split] = PackedPairsDataset(self.datasets[split], self.cfg.max_source_positions)
        return self.datasets[split]
