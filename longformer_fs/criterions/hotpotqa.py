"""fairseq adapter: the ``longformer_hotpotqa`` criterion, HotpotQA's joint loss (paper, Appendix B).

The loss is a linear combination of four terms, each summed over the batch's questions
(:func:`~longformer_fs.modules.task_heads.hotpotqa_losses`): the answer span's OR loss
over its occurrences (0 for yes/no questions), the question type's cross-entropy, and the
binary cross-entropy of the supporting paragraphs and sentences at their ``[p]`` and
``[s]`` tokens. It is logged in bits per question, each term too, with the question-type
accuracy.
"""

import math
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass

from ..modules.task_heads import hotpotqa_losses
from ..tasks.hotpotqa import HotpotqaTask
from .per_item import BitsAndAccuracyCriterion

TERMS = ("span", "type", "paragraph", "sentence")


@dataclass
class HotpotqaCriterionConfig(FairseqDataclass):
    span_weight: float = field(default=1.0, metadata={"help": "weight of the answer span's OR loss"})
    type_weight: float = field(default=1.0, metadata={"help": "weight of the question type's cross-entropy"})
    paragraph_weight: float = field(
        default=1.0, metadata={"help": "weight of the supporting-paragraph binary cross-entropy ([p] scorer)"}
    )
    sentence_weight: float = field(
        default=1.0, metadata={"help": "weight of the supporting-sentence binary cross-entropy ([s] scorer)"}
    )


@register_criterion("longformer_hotpotqa", dataclass=HotpotqaCriterionConfig)
class HotpotqaCriterion(BitsAndAccuracyCriterion):
    CORRECT, ACCURACY = "type_hits", "type_acc"

    def __init__(self, task, span_weight=1.0, type_weight=1.0, paragraph_weight=1.0, sentence_weight=1.0):
        super().__init__(task)
        self.weights = dict(zip(TERMS, (span_weight, type_weight, paragraph_weight, sentence_weight), strict=True))

    def forward(self, model, sample, reduce=True):
        logits = HotpotqaTask.model_outputs(model, sample)
        terms = hotpotqa_losses(*logits, sample)
        loss = sum(self.weights[name] * terms[name] for name in TERMS)
        questions = len(sample["qtype"])
        # Counts stay tensors: reading them here would wait for the GPU at every step.
        hits = (logits[1].argmax(dim=1) == sample["qtype"]).sum()
        return (
            loss,
            questions,
            {
                "loss": loss.data,
                **{f"{name}_loss": terms[name].data for name in TERMS},
                "ntokens": sample["ntokens"],
                "nsentences": questions,
                "sample_size": questions,
                "type_hits": hits,
            },
        )

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        questions = sum(log.get("sample_size", 0) for log in logging_outputs)
        for name in TERMS:
            total = sum(log.get(f"{name}_loss", 0) for log in logging_outputs)
            metrics.log_scalar(f"{name}_loss", total / max(questions, 1) / math.log(2), questions, round=3)
