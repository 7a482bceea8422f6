"""fairseq adapter: the ``longformer_coref`` criterion, the marginal log-likelihood of
gold antecedents (Lee et al. 2017), summed over each document's kept spans.

The segments' features are joined into each document, scored by the model's ``coref``
head (:mod:`longformer_fs.modules.coref`) and compared with the gold clusters. The loss
is logged in bits per document; ``mention_recall`` is the share of gold mentions that
survive the pruning. Counts stay tensors (fairseq sums them as such): reading them here
would wait for the device at every step. The pruning's top-k (and, with
``non_crossing``, its CPU loop) is the one place that reads scores back.
"""

import math

from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..modules.coref import antecedent_loss, gold_clusters_of
from ..tasks.coref import CorefTask


@register_criterion("longformer_coref", dataclass=FairseqDataclass)
class CorefCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        loss, kept, gold = 0.0, 0, 0
        for doc, output in zip(sample["documents"], CorefTask.model_outputs(model, sample), strict=True):
            cluster = gold_clusters_of(
                output.top_starts, output.top_ends, doc["gold_starts"], doc["gold_ends"], doc["gold_cluster"]
            )
            loss = loss + antecedent_loss(output, cluster)
            kept = kept + (cluster > 0).sum()
            gold = gold + doc["gold_starts"].numel()
        documents = len(sample["documents"])
        return (
            loss,
            documents,
            {
                "loss": loss.data,
                "ntokens": sample["ntokens"],
                "nsentences": documents,
                "sample_size": documents,
                "gold_mentions": gold,
                "kept_mentions": kept,
            },
        )

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        documents = sum(log.get("sample_size", 0) for log in logging_outputs)
        gold = sum(log.get("gold_mentions", 0) for log in logging_outputs)
        kept = sum(log.get("kept_mentions", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss / max(documents, 1) / math.log(2), documents, round=3)
        if gold:
            metrics.log_scalar("mention_recall", 100.0 * kept / gold, gold, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
