"""Plain-PyTorch pieces of the fine-tuning tasks (paper §6): the loss of extractive QA
under distant supervision, and multiple-choice logits averaged over chunks."""

from __future__ import annotations

import torch


def or_span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    allowed: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clark and Gardner's (2017) loss for answers matched in the text, not given as one span.

    Every occurrence of the answer counts: the loss is ``-log sum_{s in gold starts} p(s)
    - log sum_{e in gold ends} p(e)``, an OR over the occurrences, with ``p`` the softmax
    over the allowed (document) tokens of the window.

    Args:
        start_logits, end_logits: ``(B, T)``.
        starts, ends: ``(B, K)`` long, gold token positions, padded with -1.
        allowed: ``(B, T)`` bool, tokens that may start or end an answer.

    Returns:
        The summed loss over windows holding a gold position, and how many do (windows
        without the answer carry no target and are left out).
    """
    answered = (starts >= 0).any(dim=1)
    # A window with no allowed token has no target either; allowing all of it keeps its
    # softmax finite (a NaN there would reach the gradients through the masked rows).
    allowed = allowed | ~allowed.any(dim=1, keepdim=True)
    loss = start_logits.new_zeros((), dtype=torch.float32)
    for logits, gold in ((start_logits, starts), (end_logits, ends)):
        logp = torch.log_softmax(logits.float().masked_fill(~allowed, float("-inf")), dim=-1)
        picked = logp.gather(1, gold.clamp(min=0)).masked_fill(gold < 0, float("-inf"))
        # Windows without a target get finite stand-ins, masked out of the sum: their -inf
        # would otherwise turn into NaN gradients. No boolean indexing: the shapes stay
        # static, and nothing is read back from the device.
        picked = torch.where(answered[:, None], picked, torch.zeros_like(picked))
        loss = loss + (-torch.logsumexp(picked, dim=1)).masked_fill(~answered, 0.0).sum()
    return loss, answered.sum()


def average_over_chunks(chunk_logits: torch.Tensor, owner: torch.Tensor, num_examples: int) -> torch.Tensor:
    """Each example's logits as the mean over its chunks.

    Args:
        chunk_logits: ``(N, C)``, one row per chunk.
        owner: ``(N,)`` long, the example of each chunk (every example has one or more).
        num_examples: ``B``.

    Returns:
        ``(B, C)``.
    """
    total = chunk_logits.new_zeros(num_examples, chunk_logits.shape[1]).index_add(0, owner, chunk_logits)
    # index_add, not bincount: bincount's length depends on the data.
    counts = chunk_logits.new_zeros(num_examples).index_add(0, owner, chunk_logits.new_ones(owner.shape)).clamp(min=1)
    return total / counts[:, None]
