"""fairseq adapter: the ``longformer_wikihop`` criterion, cross-entropy over candidates.

Each chunk gives a logit at every ``[ent]`` of its prefix; a candidate's logit is the
mean over the example's chunks; the loss is the cross-entropy of the answer among the
example's candidates, logged in bits per example, with accuracy.
"""

import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass

from ..tasks.wikihop import WikihopTask
from .per_item import BitsAndAccuracyCriterion


@register_criterion("longformer_wikihop", dataclass=FairseqDataclass)
class WikihopCriterion(BitsAndAccuracyCriterion):
    CORRECT, ACCURACY = "ncorrect", "accuracy"

    def forward(self, model, sample, reduce=True):
        logits = WikihopTask.model_outputs(model, sample)
        target = sample["target"]
        loss = F.cross_entropy(logits, target, reduction="sum")
        correct = (logits.argmax(dim=1) == target).sum()  # a tensor: no wait for the GPU at each step
        return (
            loss,
            len(target),
            {
                "loss": loss.data,
                "ntokens": sample["ntokens"],
                "nsentences": len(target),
                "sample_size": len(target),
                "ncorrect": correct,
            },
        )
