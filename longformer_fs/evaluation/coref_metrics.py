"""Coreference metrics of the CoNLL-2012 shared task: MUC, B³, CEAF-φ4 and the CoNLL F1.

Each metric compares a *key* (gold) partition of mentions into entities with a *response*
(system) partition. A mention is any hashable value; this project uses ``(start, end)``
token spans of a document. Key and response may hold different mentions: a mention in
only one of them (a *twinless* mention, Pradhan et al. 2014) is scored as the reference
scorer does, without adding it to the other side.

- MUC (Vilain et al. 1995, "A model-theoretic coreference scoring scheme"): links.
  Recall = Σ_K (|K| − |p(K)|) / Σ_K (|K| − 1), where p(K) partitions the key entity K
  by the response entities, a mention of K that no response entity holds being a part of
  its own. Precision swaps key and response.
- B³ (Bagga and Baldwin 1998, "Algorithms for scoring coreference chains"): mentions.
  Recall = Σ_K Σ_R |K ∩ R|² / |K| over Σ_K |K|, the mean over key mentions of the share
  of the mention's key entity found in its response entity (0 for a mention the response
  lacks). Precision swaps key and response.
- CEAF-φ4 (Luo 2005, "On coreference resolution performance metrics"): entities.
  φ4(K, R) = 2|K ∩ R| / (|K| + |R|); Φ* is the largest Σ φ4 over one-to-one alignments
  of key to response entities (the Kuhn-Munkres assignment). Recall = Φ*/#key entities,
  precision = Φ*/#response entities.
- The CoNLL F1 (Pradhan et al. 2012) is the unweighted mean of the three F1s.

Conventions of the reference scorer (``conll/reference-coreference-scorers``, v8,
described by Pradhan et al. 2014, "Scoring coreference partitions of predicted mentions:
a reference implementation"), which this module follows:

- A corpus score is not a mean of document scores: each metric's numerators and
  denominators are summed over documents (:class:`Score` adds, :class:`CorefEvaluator`
  accumulates), then divided.
- A response that repeats a mention (:func:`normalize_response`, the scorer's
  ``IdentifMentions``): a mention the key holds stays where it first occurs and is removed
  from wherever it occurs again, in its own entity or a later one (the scorer's test cases
  TC-A-7 to TC-A-9); a mention the key lacks stays at every occurrence, and each
  occurrence counts in the size of the entity holding it. An entity left empty is dropped.
  (v8.01 also stops, refusing to score, once a run has removed more than 10 repeats; this
  module scores such a run.) A key's repeats are removed by :func:`normalize_clusters`:
  a mention counts once, in the first entity that holds it.
- A ratio with a zero denominator is 0, and so is F1 when precision and recall are both 0.

Singletons: OntoNotes annotates no singleton entities, so CoNLL-2012 keys hold none and
:func:`score_document` drops one-mention key entities by default
(``drop_key_singletons=True``); pass ``False`` to score a key as given (the reference
scorer's own test cases keep them). The response is always scored as given: a response
singleton never changes MUC, and lowers B³ and CEAF-φ4 precision unless the key holds
the same singleton.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

import numpy as np

try:  # scipy's assignment solver (a Jonker-Volgenant variant); the numpy one below otherwise
    from scipy.optimize import linear_sum_assignment as _scipy_assignment
except ImportError:  # pragma: no cover - the project's environment has scipy
    _scipy_assignment = None

__all__ = [
    "METRICS",
    "CorefEvaluator",
    "Repeat",
    "Score",
    "b_cubed",
    "ceaf_e",
    "conll_f1",
    "max_weight_assignment",
    "muc",
    "normalize_clusters",
    "normalize_response",
    "score_document",
]

Mention = Hashable
Cluster = Sequence[Mention]

# The three metrics of the CoNLL F1, in the order the reference scorer reports them.
METRICS = ("muc", "b_cubed", "ceaf_e")


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


@dataclass(frozen=True)
class Score:
    """One metric's counts on a document or a corpus: recall and precision as fractions.

    Attributes:
        recall_num, recall_den: recall = ``recall_num / recall_den`` (0 when the
            denominator is 0). The units are the metric's: links for MUC, key mentions
            for B³, key entities for CEAF-φ4.
        precision_num, precision_den: likewise, over the response.

    Scores add: the sum of two documents' scores is their corpus score, as the reference
    scorer computes it.
    """

    recall_num: float = 0.0
    recall_den: float = 0.0
    precision_num: float = 0.0
    precision_den: float = 0.0

    @property
    def recall(self) -> float:
        """Recall in [0, 1]."""
        return _ratio(self.recall_num, self.recall_den)

    @property
    def precision(self) -> float:
        """Precision in [0, 1]."""
        return _ratio(self.precision_num, self.precision_den)

    @property
    def f1(self) -> float:
        """The harmonic mean of precision and recall, in [0, 1] (0 when both are 0)."""
        p, r = self.precision, self.recall
        return _ratio(2 * p * r, p + r)

    def __add__(self, other: Score) -> Score:
        return Score(
            self.recall_num + other.recall_num,
            self.recall_den + other.recall_den,
            self.precision_num + other.precision_num,
            self.precision_den + other.precision_den,
        )


def normalize_clusters(clusters: Iterable[Cluster], drop_singletons: bool = False) -> list[frozenset]:
    """Entities as sets, each mention in one entity, by the reference scorer's rules.

    Args:
        clusters: each a sequence of mentions (hashable, e.g. ``(start, end)`` spans).
        drop_singletons: drop entities of one mention (after de-duplication).

    Returns:
        The entities in input order: a mention repeated within a cluster counts once, one
        repeated in a later cluster is removed from it, and empty entities are dropped.
    """
    seen: set = set()
    entities = []
    for cluster in clusters:
        entity = frozenset(cluster) - seen
        seen |= entity
        if len(entity) > (1 if drop_singletons else 0):
            entities.append(entity)
    return entities


@dataclass(frozen=True)
class Repeat:
    """A further occurrence of a response mention that the key lacks (:func:`normalize_response`).

    Attributes:
        mention: the mention repeated.
        occurrence: 1 for its second occurrence in the response, 2 for its third, ...
    """

    mention: Mention
    occurrence: int


def normalize_response(clusters: Iterable[Cluster], key: Sequence[frozenset]) -> list[frozenset]:
    """Response entities as sets, scored against ``key`` as the reference scorer scores them.

    Args:
        clusters: the response's clusters, each a sequence of mentions.
        key: the key's entities, as :func:`normalize_clusters` returns them.

    Returns:
        The entities in input order. A mention that some key entity holds is kept at its
        first occurrence (clusters in order, each cluster's mentions in order) and removed
        from every later one. A mention that no key entity holds is kept at every
        occurrence: the first as itself, each later one as a :class:`Repeat`, so that it
        counts in its entity's size. Entities left empty are dropped.
    """
    # CorScorer.pm v8.01 (IdentifMentions) walks the response once, removing a mention when
    # it already carries an id, and gives ids in that walk only to mentions found in the
    # key; the mentions the key lacks get their ids after it, one id per span. So a repeated
    # key mention survives only at its first occurrence, while a repeated twinless mention
    # survives everywhere, every occurrence under the one id. MUC, B³ and CEAF-φ4 only ever
    # match a twinless id against the key, which lacks it, so what its repeats change is
    # the size of the response entities holding them (MUC's links |R| - 1, B³'s |R|, φ4's
    # |R|) and which entities are left non-empty; a Repeat, a member no key entity holds,
    # has exactly those effects.
    in_key = set().union(*key)
    placed: set = set()  # key mentions already kept in a response entity
    occurrences: Counter = Counter()  # twinless mention -> occurrences so far
    entities = []
    for cluster in clusters:
        entity = set()
        for mention in cluster:
            if mention in in_key:
                if mention not in placed:
                    placed.add(mention)
                    entity.add(mention)
            else:
                seen = occurrences[mention]
                entity.add(Repeat(mention, seen) if seen else mention)
                occurrences[mention] = seen + 1
        if entity:
            entities.append(frozenset(entity))
    return entities


def _overlaps(key: Sequence[frozenset], response: Sequence[frozenset]) -> Counter:
    """``{(i, j): |key[i] ∩ response[j]|}`` for the pairs that share a mention."""
    entity_of = {mention: j for j, entity in enumerate(response) for mention in entity}
    overlaps: Counter = Counter()
    for i, entity in enumerate(key):
        for mention in entity:
            if mention in entity_of:
                overlaps[i, entity_of[mention]] += 1
    return overlaps


def _muc_side(gold: Sequence[frozenset], overlaps: Counter) -> tuple[int, int]:
    """MUC's ``(Σ |S| − |p(S)|, Σ |S| − 1)`` over the entities S of one side, ``overlaps``
    keyed by (index in ``gold``, index on the other side)."""
    parts = [0] * len(gold)  # other-side entities meeting each S; then + its twinless mentions
    shared = [0] * len(gold)
    for (i, _), count in overlaps.items():
        parts[i] += 1
        shared[i] += count
    numerator = sum(len(s) - (parts[i] + len(s) - shared[i]) for i, s in enumerate(gold))
    return numerator, sum(len(s) - 1 for s in gold)


def _swap(overlaps: Counter) -> Counter:
    return Counter({(j, i): count for (i, j), count in overlaps.items()})


def muc(key: Sequence[frozenset], response: Sequence[frozenset]) -> Score:
    """MUC (Vilain et al. 1995) of normalised entities (:func:`normalize_clusters`,
    :func:`normalize_response`).

    Singleton entities have no links: they change neither side's counts.
    """
    overlaps = _overlaps(key, response)
    recall = _muc_side(key, overlaps)
    precision = _muc_side(response, _swap(overlaps))
    return Score(*recall, *precision)


def b_cubed(key: Sequence[frozenset], response: Sequence[frozenset]) -> Score:
    """B³ (Bagga and Baldwin 1998) of normalised entities, twinless mentions scoring 0.

    Summing |K ∩ R|²/|K| over pairs is the per-mention sum: each of the |K ∩ R| mentions
    shared by K and R contributes |K ∩ R|/|K|.
    """
    overlaps = _overlaps(key, response)
    recall_num = sum(n * n / len(key[i]) for (i, _), n in overlaps.items())
    precision_num = sum(n * n / len(response[j]) for (_, j), n in overlaps.items())
    return Score(recall_num, sum(map(len, key)), precision_num, sum(map(len, response)))


def ceaf_e(key: Sequence[frozenset], response: Sequence[frozenset]) -> Score:
    """Entity-based CEAF, CEAF-φ4 (Luo 2005), of normalised entities.

    The numerators are Φ*, the best one-to-one alignment's Σ φ4; the denominators the
    numbers of key and response entities.
    """
    similarity = np.zeros((len(key), len(response)))
    for (i, j), n in _overlaps(key, response).items():
        similarity[i, j] = 2 * n / (len(key[i]) + len(response[j]))
    rows, cols = max_weight_assignment(similarity)
    best = float(similarity[rows, cols].sum())
    return Score(best, len(key), best, len(response))


def max_weight_assignment(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A one-to-one assignment of rows to columns of largest total weight.

    Args:
        weights: a ``(rows, cols)`` float array, either side possibly 0 long.

    Returns:
        ``(rows, cols)``: index arrays of the ``min(rows, cols)`` assigned pairs. With
        scipy, its ``linear_sum_assignment``; without it, :func:`_hungarian`.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.size == 0:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    if _scipy_assignment is not None:
        return _scipy_assignment(weights, maximize=True)
    return _hungarian(weights)


def _hungarian(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Hungarian method (Kuhn 1955; Munkres 1957) with potentials, O(n²m).

    Minimises the cost ``-weights`` over a matrix transposed to have no more rows than
    columns, adding one row at a time along a shortest augmenting path found with the
    dual potentials ``u`` (rows) and ``v`` (columns), which keep every reduced cost
    ``cost - u - v`` non-negative.
    """
    transposed = weights.shape[0] > weights.shape[1]
    cost = -(weights.T if transposed else weights)
    n, m = cost.shape
    u = np.zeros(n + 1)  # row potentials; index 0 is a sentinel
    v = np.zeros(m + 1)  # column potentials
    row_of = np.zeros(m + 1, dtype=int)  # row_of[j]: the row (1-based) assigned to column j, 0 if none
    for row in range(1, n + 1):
        row_of[0] = row
        column = 0
        min_slack = np.full(m + 1, np.inf)
        previous = np.zeros(m + 1, dtype=int)
        used = np.zeros(m + 1, dtype=bool)
        while row_of[column]:
            used[column] = True
            i = row_of[column]
            slack = cost[i - 1] - u[i] - v[1:]
            better = ~used[1:] & (slack < min_slack[1:])
            min_slack[1:][better] = slack[better]
            previous[1:][better] = column
            free = np.flatnonzero(~used[1:]) + 1
            nearest = free[np.argmin(min_slack[free])]
            delta = min_slack[nearest]
            u[row_of[used]] += delta
            v[used] -= delta
            min_slack[~used] -= delta
            column = nearest
        while column:  # flip the augmenting path
            row_of[column] = row_of[previous[column]]
            column = previous[column]
    cols = np.flatnonzero(row_of[1:]) + 1
    rows = row_of[cols] - 1
    cols = cols - 1
    if transposed:
        rows, cols = cols, rows
    order = np.argsort(rows)
    return rows[order], cols[order]


_METRIC_FUNCTIONS = {"muc": muc, "b_cubed": b_cubed, "ceaf_e": ceaf_e}


def score_document(
    key: Iterable[Cluster], response: Iterable[Cluster], drop_key_singletons: bool = True
) -> dict[str, Score]:
    """MUC, B³ and CEAF-φ4 of one document.

    Args:
        key: the gold clusters, each a sequence of mentions (``(start, end)`` spans).
        response: the predicted clusters, of mentions comparable with the key's; a mention
            repeated is scored as :func:`normalize_response` says.
        drop_key_singletons: drop one-mention key entities first, as CoNLL-2012's keys
            hold none (see the module's docstring); ``False`` scores the key as given.

    Returns:
        ``{"muc", "b_cubed", "ceaf_e"}`` to their :class:`Score`.
    """
    key_entities = normalize_clusters(key, drop_singletons=drop_key_singletons)
    response_entities = normalize_response(response, key_entities)
    return {name: _METRIC_FUNCTIONS[name](key_entities, response_entities) for name in METRICS}


def conll_f1(scores: dict[str, Score]) -> float:
    """The CoNLL F1 in [0, 1]: the mean of the MUC, B³ and CEAF-φ4 F1s."""
    return sum(scores[name].f1 for name in METRICS) / len(METRICS)


@dataclass
class CorefEvaluator:
    """Corpus scores, accumulated document by document as the reference scorer does.

    Attributes:
        drop_key_singletons: passed to :func:`score_document` for every document.
        totals: each metric's :class:`Score` summed over the documents added.
        documents: the number of documents added.
    """

    drop_key_singletons: bool = True
    totals: dict[str, Score] = field(default_factory=lambda: {name: Score() for name in METRICS})
    documents: int = 0

    def add(self, key: Iterable[Cluster], response: Iterable[Cluster]) -> dict[str, Score]:
        """Score one document, add it to the totals and return its own scores."""
        scores = score_document(key, response, drop_key_singletons=self.drop_key_singletons)
        for name in METRICS:
            self.totals[name] += scores[name]
        self.documents += 1
        return scores

    @property
    def conll_f1(self) -> float:
        """The corpus CoNLL F1 in [0, 1]."""
        return conll_f1(self.totals)

    def summary(self) -> dict:
        """The corpus scores in percent: ``{metric: {"precision", "recall", "f1"}}`` for
        each of :data:`METRICS`, ``"conll_f1"`` and ``"documents"`` (a count)."""
        result: dict = {
            name: {
                "precision": 100.0 * score.precision,
                "recall": 100.0 * score.recall,
                "f1": 100.0 * score.f1,
            }
            for name, score in self.totals.items()
        }
        result["conll_f1"] = 100.0 * self.conll_f1
        result["documents"] = self.documents
        return result
