"""Clusters of a ``longformer_coref`` checkpoint over a ``prep coref`` split, and their scores.

Each document is read as in training (its segments, no global attention); every kept span
takes its best antecedent (the dummy: none) and the links chain into clusters
(:func:`~longformer_fs.modules.coref.predict_clusters`). Token spans map back to word
spans through the prepared ``subtoken_map``, so predictions and the gold clusters of
``{split}.examples.jsonl`` are compared in the words of the CoNLL file, by MUC, B³,
CEAF-φ4 and the CoNLL F1 with the key's singletons dropped (CoNLL-2012).
"""

from __future__ import annotations

import torch

from ..modules.coref import predict_clusters
from .batches import batches, listed_split
from .coref_metrics import CorefEvaluator


def word_clusters(token_clusters: list[list[tuple[int, int]]], subtoken_map: list[int]) -> list[list[tuple[int, int]]]:
    """Token spans ``(start, end)`` -> word spans, through each token's word."""
    return [[(subtoken_map[s], subtoken_map[e]) for s, e in cluster] for cluster in token_clusters]


def predict_split(model, task, split: str, device: str | torch.device = "cpu", progress: bool = True) -> list[dict]:
    """``[{"id", "part", "clusters"}]`` (word spans), one per document of ``split``, in file order."""
    dataset, examples = listed_split(task, split, "documents")
    predictions = []
    for samples, batch in batches(dataset, 1, device, f"coref {split}", "doc", progress):
        (output,) = task.model_outputs(model, batch)
        example = examples[samples[0]["id"]]
        clusters = word_clusters(predict_clusters(output), example["subtoken_map"])
        predictions.append({"id": example["id"], "part": example["part"], "clusters": clusters})
    return predictions


def score_split(task, split: str, predictions: list[dict]) -> dict:
    """MUC, B³, CEAF-φ4 (precision, recall, F1) and the CoNLL F1, in percent, over the split."""
    evaluator = CorefEvaluator()
    for example, predicted in zip(task.examples(split), predictions, strict=True):
        key = [[tuple(span) for span in cluster] for cluster in example["clusters"]]
        evaluator.add(key, [[tuple(span) for span in cluster] for cluster in predicted["clusters"]])
    return evaluator.summary()
