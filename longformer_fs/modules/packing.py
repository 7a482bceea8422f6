"""Rows that pack several documents: what a model needs of them besides the attention's
boundaries (``documents``, :func:`longformer_fs.attention.banded_attention`).

- :func:`document_positions`: each document's positions restart, at RoBERTa's offset
  (``padding_idx + 1``), as each would be numbered alone; padding keeps ``padding_idx``.
  (0-based positions in packed rows silently broke RoBERTa-family models elsewhere: HF
  transformers #47496.)
- :func:`document_starts`: where each position's document starts.
"""

from __future__ import annotations

import torch


def document_positions(documents: torch.Tensor, padding: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """``(B, T)`` long: ``padding_idx + 1 + i`` for the ``i``-th token of its document,
    ``padding_idx`` for padding.

    Args:
        documents: ``(B, T)`` document ids, contiguous and not decreasing along a row.
        padding: ``(B, T)`` bool, True for padding.
    """
    index = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    positions = index - document_starts(documents) + padding_idx + 1
    return positions.masked_fill(padding, padding_idx)


def document_starts(documents: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` long: the position where each position's document starts.

    Args:
        documents: ``(B, T)`` document ids, contiguous along a row.
    """
    index = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    # The last start at or before each position: a running maximum, no host read.
    return torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
