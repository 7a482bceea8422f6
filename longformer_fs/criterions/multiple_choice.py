"""fairseq adapter: the ``longformer_wikihop`` criterion, cross-entropy over candidates.

Each chunk gives a logit at every ``[ent]`` of its prefix; a candidate's logit is the
mean over the example's chunks; the loss is the cross-entropy of the answer among the
example's candidates, logged in bits per example, with accuracy.
"""

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass

from longformer_fs.modules.task_heads import average_over_chunks
from longformer_fs.tasks.multiple_choice import CANDIDATE_HEAD

from .per_item import BitsAndAccuracyCriterion


def candidate_logits(model, sample) -> torch.Tensor:
    """``(B, C)`` logits of each example's candidates, averaged over its chunks (-inf for padding)."""
    features, _ = model(**sample["net_input"], features_only=True)
    per_token = model.token_logits(CANDIDATE_HEAD, features)[..., 0].float()  # (chunks, T)
    owner = sample["owner"]
    per_chunk = per_token.gather(1, sample["candidates"][owner])  # (chunks, C)
    logits = average_over_chunks(per_chunk, owner, len(sample["target"]))
    return logits.masked_fill(~sample["candidate_mask"], float("-inf"))


@register_criterion("longformer_wikihop", dataclass=FairseqDataclass)
class MultipleChoiceCriterion(BitsAndAccuracyCriterion):
    CORRECT, ACCURACY = "ncorrect", "accuracy"

    def forward(self, model, sample, reduce=True):
        logits = candidate_logits(model, sample)
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
