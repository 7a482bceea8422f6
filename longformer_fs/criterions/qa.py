"""fairseq adapter: the ``longformer_qa`` criterion, Clark and Gardner's OR loss.

The answer text is matched at every occurrence in the window (``prep qa``); the loss is
``-log sum p(gold starts) - log sum p(gold ends)`` over the window's document tokens
(:func:`~longformer_fs.modules.task_heads.or_span_loss`), logged in bits per window
with an answer. ``span_acc`` is the share of those windows whose best start and best end
are gold positions. Windows packed in rows are scored each alone.
"""

import torch
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass

from ..modules.task_heads import or_span_loss
from ..tasks.qa import QaTask
from .per_item import BitsAndAccuracyCriterion


@register_criterion("longformer_qa", dataclass=FairseqDataclass)
class QaCriterion(BitsAndAccuracyCriterion):
    CORRECT, ACCURACY = "span_hits", "span_acc"

    def forward(self, model, sample, reduce=True):
        logits, starts, ends, allowed = QaTask.window_spans(model, sample)
        loss, answered = or_span_loss(logits[..., 0], logits[..., 1], starts, ends, allowed)
        with torch.no_grad():
            best = logits.masked_fill(~allowed[..., None], float("-inf")).argmax(dim=1)  # (B, 2)
            hit = (best[:, :1] == starts).any(dim=1) & (best[:, 1:] == ends).any(dim=1) & (starts >= 0).any(dim=1)
        # Counts stay tensors (fairseq sums them as such): reading them here would wait for
        # the GPU at every step.
        return (
            loss,
            answered,
            {
                "loss": loss.data,
                "ntokens": sample["ntokens"],
                "nsentences": sample["nsentences"],
                "sample_size": answered,
                "span_hits": hit.sum(),
            },
        )
