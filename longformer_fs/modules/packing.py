"""Rows that pack several documents: what a model needs of them besides the attention's
boundaries (``documents``, :func:`longformer_fs.attention.banded_attention`).

- :func:`document_positions`: each document's positions restart, at RoBERTa's offset
  (``padding_idx + 1``), as each would be numbered alone; padding keeps ``padding_idx``.
  (0-based positions in packed rows silently broke RoBERTa-family models elsewhere: HF
  transformers #47496.)
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
    seq_len = documents.shape[1]
    index = torch.arange(seq_len, device=documents.device).expand_as(documents)
    starts = torch.ones_like(padding)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    # The start of each position's document: the last start at or before it (no host read).
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    positions = index - first + padding_idx + 1
    return positions.masked_fill(padding, padding_idx)
