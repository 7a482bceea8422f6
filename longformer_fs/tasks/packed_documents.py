"""Rows that pack several whole documents (issue #75), for fairseq's datasets.

:class:`PackedDocumentsDataset` fills rows of up to ``capacity`` tokens with items that each
belong to one document (fairseq's ``complete_doc`` blocks: a document longer than a row is
already split at the row's length), first-fit by length, longest first, so short documents
fill the gaps long ones leave (a piece longer than a row is cut at the row's length).
:class:`DocumentIdsDataset` gives each row's document ids,
``(T,)``, which the models take as ``net_input["documents"]``: each document then gets its
own band, its own global tokens and positions that restart (``longformer_fs.attention``,
:mod:`longformer_fs.modules.packing`). :class:`MaxDocumentsDataset` counts, where the
batch is made, the most documents a row of it holds (``net_input["max_documents"]``): a
bound that spares the layers a read-back from the device.
"""

from __future__ import annotations

import numpy as np
import torch
from fairseq.data import FairseqDataset

# The document id of padding positions: after every real document of a row, so ids never
# decrease along it (padding is masked whatever its id).
PADDED_DOCUMENT = 2**31 - 1
DOCUMENT_SLOTS = 8  # a batch's bound on the documents of a row is a multiple of this


def document_bound(most: int) -> int:
    """A batch's bound on the documents of a row (``net_input["max_documents"]``): the most a
    row holds, rounded up to a multiple of :data:`DOCUMENT_SLOTS` (fewer shapes for a
    compiled model)."""
    return -(-max(most, 1) // DOCUMENT_SLOTS) * DOCUMENT_SLOTS


def first_fit(sizes: np.ndarray, capacity: int) -> list[np.ndarray]:
    """Item indices per row: items longest first, each into the first row it fits.

    Args:
        sizes: ``(N,)`` item lengths, each at most ``capacity``.
        capacity: tokens per row.

    Returns:
        The rows in the order they were opened, each its items in the order placed.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) and sizes.max() > capacity:
        raise ValueError(f"an item of {int(sizes.max())} tokens does not fit a row of {capacity}")
    order = np.argsort(-sizes, kind="stable")
    # A max-tree over the rows' free space finds the first row with room in log time.
    leaves = 1
    while leaves < max(1, len(sizes)):
        leaves *= 2
    free = np.full(2 * leaves, -1, dtype=np.int64)  # -1: a row not opened yet
    rows: list[list[int]] = []
    for item in order:
        need = int(sizes[item])
        node = 1
        if free[1] < need:  # no open row has room: open the next
            row = len(rows)
            rows.append([])
            node = leaves + row
            free[node] = capacity
        else:
            while node < leaves:
                node = 2 * node if free[2 * node] >= need else 2 * node + 1
            row = node - leaves
        rows[row].append(int(item))
        free[node] -= need
        node //= 2
        while node:
            free[node] = max(free[2 * node], free[2 * node + 1])
            node //= 2
    return [np.asarray(row, dtype=np.int64) for row in rows]


class PackedDocumentsDataset(FairseqDataset):
    """Rows of whole items (each within one document) packed up to ``capacity`` tokens.

    An item longer than a row (``complete_doc`` keeps a sentence longer than a block whole)
    is cut at the row's length, each later piece starting with ``bos`` again, as a block
    of its own does; each piece is then a document of its row.

    Args:
        dataset: the items, 1-D token tensors (``complete_doc`` blocks with their ``<s>``).
        sizes: their lengths.
        capacity: tokens per row (``tokens_per_sample``).
        bos: the token each cut piece after the first starts with.
    """

    def __init__(self, dataset, sizes, capacity: int, bos: int):
        super().__init__()
        self.dataset, self.capacity, self.bos = dataset, capacity, bos
        # (item, start, end, with <s> first) of every piece.
        self.pieces = []
        for item, size in enumerate(np.asarray(sizes, dtype=np.int64).tolist()):
            self.pieces.append((item, 0, min(size, capacity), False))
            for start in range(capacity, size, capacity - 1):
                self.pieces.append((item, start, min(start + capacity - 1, size), True))
        piece_sizes = np.array([end - start + bos_first for _, start, end, bos_first in self.pieces], dtype=np.int64)
        self.rows = first_fit(piece_sizes, capacity)
        self.item_sizes = [piece_sizes[row] for row in self.rows]
        self._sizes = np.array([int(s.sum()) for s in self.item_sizes], dtype=np.int64)

    def __getitem__(self, index: int) -> torch.Tensor:
        parts = []
        for piece in self.rows[index]:
            item, start, end, bos_first = self.pieces[int(piece)]
            tokens = self.dataset[item][start:end]
            parts.append(torch.cat([tokens.new_tensor([self.bos]), tokens]) if bos_first else tokens)
        return torch.cat(parts)

    def items(self, index: int) -> list[int]:
        """The items whose pieces row ``index`` holds, in its order (an item cut in pieces
        appears once a piece)."""
        return [self.pieces[int(piece)][0] for piece in self.rows[index]]

    def documents(self, index: int) -> torch.Tensor:
        """``(T,)`` long: the document of each token of row ``index``, 0, 1, ... in order."""
        lengths = torch.from_numpy(self.item_sizes[index])
        return torch.repeat_interleave(torch.arange(len(lengths)), lengths)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def sizes(self) -> np.ndarray:
        return self._sizes

    def num_tokens(self, index: int) -> int:
        return int(self._sizes[index])

    def size(self, index: int) -> int:
        return int(self._sizes[index])

    def ordered_indices(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64)

    @property
    def supports_prefetch(self) -> bool:
        return False

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)


class DocumentIdsDataset(FairseqDataset):
    """Each row's document ids (:meth:`PackedDocumentsDataset.documents`), for
    ``RightPadDataset(..., pad_idx=PADDED_DOCUMENT)``."""

    def __init__(self, packed: PackedDocumentsDataset):
        super().__init__()
        self.packed = packed

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.packed.documents(index)

    def __len__(self) -> int:
        return len(self.packed)

    @property
    def sizes(self) -> np.ndarray:
        return self.packed.sizes

    def num_tokens(self, index: int) -> int:
        return self.packed.num_tokens(index)

    def size(self, index: int) -> int:
        return self.packed.size(index)


class MaxDocumentsDataset(FairseqDataset):
    """The most documents a row of a batch holds, counted on the host where the batch is
    made and rounded up to a multiple of :data:`DOCUMENT_SLOTS` (fewer shapes for a compiled
    model): a bound the layers take instead of reading a count back from the device (the
    ``flash`` backend's segments; with ``--max-global-tokens``, each document's, a row's
    global tokens)."""

    def __init__(self, packed: PackedDocumentsDataset):
        super().__init__()
        self.packed = packed

    def __getitem__(self, index: int) -> int:
        return len(self.packed.rows[index])

    def __len__(self) -> int:
        return len(self.packed)

    def collater(self, samples: list[int]) -> int:
        return document_bound(max(samples, default=1))
