"""What the token-head criterions log: the loss in bits per item and one accuracy."""

import math

from fairseq import metrics
from fairseq.criterions import FairseqCriterion


class BitsAndAccuracyCriterion(FairseqCriterion):
    """A criterion whose ``sample_size`` counts items (examples, windows with an answer).

    It logs ``loss`` in bits per item and, when there was an item, the percentage of
    items that the logging outputs' ``CORRECT`` key counts as :attr:`ACCURACY`.
    """

    CORRECT = ""  # the logging-output key of the correct items
    ACCURACY = ""  # the metric's name

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        items = sum(log.get("sample_size", 0) for log in logging_outputs)
        correct = sum(log.get(cls.CORRECT, 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss / max(items, 1) / math.log(2), items, round=3)
        if items:
            metrics.log_scalar(cls.ACCURACY, 100.0 * correct / items, items, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
