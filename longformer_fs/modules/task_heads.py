"""Plain-PyTorch pieces of the fine-tuning tasks (paper §6): the loss of extractive QA
under distant supervision, multiple-choice logits averaged over chunks, and HotpotQA's
evidence scorer and joint loss."""

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


# ---------------------------------------------------------------- HotpotQA (paper, Appendix B)


class EvidenceScorer(torch.nn.Module):
    """HotpotQA's 2-layer feed-forward scorer of a ``[p]`` or ``[s]`` token: Linear, GELU, Linear.

    ``(..., C)`` features -> ``(..., 1)`` logits (a supporting paragraph or sentence), the
    shape of a 1-output token head. BERT's initialisation: normal weights (std 0.02), zero
    biases.
    """

    def __init__(self, dim: int, hidden: int | None = None):
        super().__init__()
        self.dense = torch.nn.Linear(dim, hidden or dim)
        self.out = torch.nn.Linear(hidden or dim, 1)
        for linear in (self.dense, self.out):
            torch.nn.init.normal_(linear.weight, std=0.02)
            torch.nn.init.zeros_(linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(torch.nn.functional.gelu(self.dense(features)))


def marker_bce_loss(logits: torch.Tensor, labels: torch.Tensor, markers: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the marker tokens, the mean over each example's markers summed over examples.

    The per-example mean keeps a 40-sentence example from outweighing a 4-sentence one.

    Args:
        logits: ``(B, T)``.
        labels: ``(B, T)``, 1 at supporting markers (anything elsewhere is ignored).
        markers: ``(B, T)`` bool, the scored tokens (an example may have none: it adds 0).
    """
    per_token = torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
    per_token = torch.where(markers, per_token, torch.zeros_like(per_token))
    return (per_token.sum(dim=1) / markers.sum(dim=1).clamp(min=1)).sum()


def hotpotqa_losses(
    span_logits: torch.Tensor,
    type_logits: torch.Tensor,
    paragraph_logits: torch.Tensor,
    sentence_logits: torch.Tensor,
    sample: dict,
) -> dict[str, torch.Tensor]:
    """The four terms of HotpotQA's joint loss, each summed over the batch's examples.

    Args:
        span_logits: ``(B, T, 2)`` start and end logits.
        type_logits: ``(B, 3)`` span / yes / no, from the first token.
        paragraph_logits, sentence_logits: ``(B, T)`` scorer logits.
        sample: the batch: ``starts``/``ends`` ``(B, K)`` (-1 padded; none for yes/no
            questions, whose span term is 0), ``answer_mask``, ``paragraph_mask``,
            ``sentence_mask`` ``(B, T)`` bool, ``paragraph_labels``, ``sentence_labels``
            ``(B, T)``, ``qtype`` ``(B,)``.

    Returns:
        ``span`` (OR loss over the answer's occurrences), ``type`` (cross-entropy),
        ``paragraph`` and ``sentence`` (:func:`marker_bce_loss`), and ``answered``, the
        examples with a gold span.
    """
    span, answered = or_span_loss(
        span_logits[..., 0], span_logits[..., 1], sample["starts"], sample["ends"], sample["answer_mask"]
    )
    return {
        "span": span,
        "type": torch.nn.functional.cross_entropy(type_logits.float(), sample["qtype"], reduction="sum"),
        "paragraph": marker_bce_loss(paragraph_logits, sample["paragraph_labels"], sample["paragraph_mask"]),
        "sentence": marker_bce_loss(sentence_logits, sample["sentence_labels"], sample["sentence_mask"]),
        "answered": answered,
    }
