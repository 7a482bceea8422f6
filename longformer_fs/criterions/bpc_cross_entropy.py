"""fairseq adapter: cross-entropy that reports bits per character.

``bpc`` is the summed negative log-likelihood over the scored characters divided by
their count and by ln 2; ``scored`` is that count, so an evaluation can check that
every character of a split was scored exactly once.
"""

import math

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig


@register_criterion("bpc_cross_entropy", dataclass=CrossEntropyCriterionConfig)
class BpcCrossEntropyCriterion(CrossEntropyCriterion):
    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        CrossEntropyCriterion.reduce_metrics(logging_outputs)
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        if ntokens:
            metrics.log_scalar("bpc", loss_sum / ntokens / math.log(2), ntokens, round=4)
            metrics.log_scalar_sum("scored", ntokens)
