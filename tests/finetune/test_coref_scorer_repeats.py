"""A response that repeats a mention, scored as the reference scorer (CorScorer.pm v8.01)
scores it: worked by hand on small documents, and against a transcription of the scorer's
steps on random responses full of repeats.

The scorer's rule (``IdentifMentions``): walking the response's entities in order, a
mention that matches a key mention keeps its first occurrence and loses every later one,
in the same entity or another; a mention that matches none stays at every occurrence, all
of them one mention id, so each occurrence counts in its entity's size. Entities left
empty are dropped. MUC, B³ and CEAF-φ4 are then computed on those entities.
"""

import itertools
import random
from fractions import Fraction as R

import pytest

from longformer_fs.evaluation.coref_metrics import (
    METRICS,
    Repeat,
    b_cubed,
    ceaf_e,
    muc,
    normalize_clusters,
    normalize_response,
    score_document,
)

# Word spans: a, b, c form key entity K1, d and e key entity K2; x and y are in no key entity.
a, b, c, d, e = (0, 0), (2, 3), (5, 5), (7, 8), (10, 10)
x, y = (12, 12), (14, 15)
KEY = [[a, b, c], [d, e]]

# (case, response, {metric: (recall, precision)}, the same counts if repeats were dropped
# everywhere, or None when that rule gives the same scores). Key links: (3 - 1) + (2 - 1) = 3;
# key mentions 5; key entities 2.
CASES = [
    (
        # b again in its own entity: removed there, the response is {a b} {d e}.
        "key mention twice in one entity",
        [[a, b, b], [d, e]],
        {
            # MUC: correct links a-b, d-e = 2; response links 1 + 1 = 2.
            "muc": (R(2, 3), R(2, 2)),
            # B³ recall: a, b 2/3 each, c 0, d, e 1 each: (4/3 + 2)/5. Precision: 4 mentions at 1.
            "b_cubed": (R(10, 3) / 5, R(4, 4)),
            # φ4(K1, {a b}) = 2·2/(3 + 2) = 4/5, φ4(K2, {d e}) = 1: Φ = 9/5 over 2 and 2 entities.
            "ceaf_e": (R(9, 5) / 2, R(9, 5) / 2),
        },
        None,
    ),
    (
        # d first in the first entity: kept there, removed from the second, which keeps e.
        "key mention in two entities",
        [[a, b, d], [d, e]],
        {
            # MUC: correct links a-b only = 1; response links 2 + 0 = 2.
            "muc": (R(1, 3), R(1, 2)),
            # B³ recall: a, b 2/3 each, c 0, d 1/2 ({a b d} holds one of K2), e 1/2: (7/3)/5.
            # Precision: a, b 2/3 each, d 1/3 in {a b d}; e 1/1 in {e}: (5/3 + 1)/4.
            "b_cubed": (R(7, 3) / 5, R(8, 3) / 4),
            # φ4(K1, {a b d}) = 4/6, φ4(K2, {e}) = 2/3 (better than K2 with {a b d}, 2/5): Φ = 4/3.
            "ceaf_e": (R(4, 3) / 2, R(4, 3) / 2),
        },
        None,
    ),
    (
        # x, in no key entity, twice in one entity: both stay, {a b x x} has 4 mentions.
        "twinless mention twice in one entity",
        [[a, b, x, x], [d, e]],
        {
            # MUC: correct links a-b, d-e = 2; response links (4 - 1) + (2 - 1) = 4.
            "muc": (R(2, 3), R(2, 4)),
            # B³ recall as above, (4/3 + 2)/5. Precision: a, b 2/4 each, x, x 0; d, e 1: 3/6.
            "b_cubed": (R(10, 3) / 5, R(3, 6)),
            # φ4(K1, {a b x x}) = 2·2/(3 + 4) = 4/7, φ4(K2, {d e}) = 1: Φ = 11/7.
            "ceaf_e": (R(11, 7) / 2, R(11, 7) / 2),
        },
        # Dropped: {a b x}: MUC 2/3 links; B³ precision (4/3 + 2)/5; φ4 4/6, Φ = 5/3.
        {"muc": (R(2, 3), R(2, 3)), "b_cubed": (R(2, 3), R(2, 3)), "ceaf_e": (R(5, 6), R(5, 6))},
    ),
    (
        # x in both entities: it stays in both.
        "twinless mention in two entities",
        [[a, b, x], [d, e, x]],
        {
            # MUC: correct links a-b, d-e = 2; response links 2 + 2 = 4.
            "muc": (R(2, 3), R(2, 4)),
            # B³ precision: a, b 2/3 each, x 0; d, e 2/3 each, x 0: (8/3)/6.
            "b_cubed": (R(10, 3) / 5, R(8, 3) / 6),
            # φ4(K1, {a b x}) = 4/6, φ4(K2, {d e x}) = 4/5: Φ = 22/15.
            "ceaf_e": (R(22, 15) / 2, R(22, 15) / 2),
        },
        # Dropped: {a b x} {d e}: MUC 2/3 links; B³ precision (4/3 + 2)/5; Φ = 2/3 + 1.
        {"muc": (R(2, 3), R(2, 3)), "b_cubed": (R(2, 3), R(2, 3)), "ceaf_e": (R(5, 6), R(5, 6))},
    ),
    (
        # The entities exactly, and x alone twice: two twinless singleton entities.
        "twinless singleton entity twice",
        [[a, b, c], [d, e], [x], [x]],
        {
            # MUC: singletons have no links: 3/3 both ways.
            "muc": (R(3, 3), R(3, 3)),
            # B³ precision: 5 mentions at 1, x and x at 0: 5/7.
            "b_cubed": (R(5, 5), R(5, 7)),
            # Φ = 1 + 1 over 2 key and 4 response entities.
            "ceaf_e": (R(2, 2), R(2, 4)),
        },
        # Dropped: the second {x} is empty and goes: B³ precision 5/6, CEAF-φ4 2/3.
        {"muc": (1, 1), "b_cubed": (1, R(5, 6)), "ceaf_e": (1, R(2, 3))},
    ),
]


def approx_scores(scores: dict) -> dict:
    return {name: (pytest.approx(float(r)), pytest.approx(float(p))) for name, (r, p) in scores.items()}


@pytest.mark.parametrize("case, response, expected, dropped", CASES, ids=[case[0] for case in CASES])
def test_repeats_score_as_the_reference_scorer_scores_them(case, response, expected, dropped):
    got = score_document(KEY, response)
    assert {name: (got[name].recall, got[name].precision) for name in METRICS} == approx_scores(expected)
    # Dropping every repeat, as eval-coref did, gives other scores where the twinless mention repeats.
    key, deduplicated = normalize_clusters(KEY), normalize_clusters(response)
    old = {name: metric(key, deduplicated) for name, metric in zip(METRICS, (muc, b_cubed, ceaf_e), strict=True)}
    assert {name: (old[name].recall, old[name].precision) for name in METRICS} == approx_scores(dropped or expected)


def test_a_mention_of_a_dropped_key_singleton_is_twinless():
    # CoNLL-2012 keys hold no singletons, so {x} leaves the key (drop_key_singletons) and a
    # response's x matches no key mention: both {x} stay, as in the singleton case above.
    got = score_document([*KEY, [x]], [[a, b, c], [d, e], [x], [x]])
    assert (got["b_cubed"].precision, got["ceaf_e"].precision) == pytest.approx((5 / 7, 2 / 4))
    # Scored with its singleton, the key holds x: the second {x} goes (B³ 6/6, CEAF-φ4 3 of 3).
    got = score_document([*KEY, [x]], [[a, b, c], [d, e], [x], [x]], drop_key_singletons=False)
    assert (got["b_cubed"].precision, got["ceaf_e"].precision) == pytest.approx((1, 1))


def test_normalize_response_keeps_twinless_repeats_as_repeats():
    key = normalize_clusters([[a, b]])
    entities = normalize_response([[a, a, x, x], [a, x, y], [b], [a]], key)
    assert entities == [{a, x, Repeat(x, 1)}, {Repeat(x, 2), y}, {b}]


# ---------------------------------------------------------------- the scorer's steps, transcribed


def reference_counts(key: list[list], response: list[list]) -> dict[str, tuple]:
    """(recall num, recall den, precision num, precision den) of MUC, B³ and CEAF-φ4, by
    CorScorer.pm v8.01's steps: mention ids, the response walk that removes repeats of key
    mentions, then each metric over chains of ids. ``key`` holds no repeats."""
    ids = {m: i for i, m in enumerate(m for entity in key for m in entity)}
    matched: dict = {}  # response mention -> key id, set during the walk
    walked = []
    for entity in response:
        kept = []
        for m in entity:
            if m in matched:
                continue  # a repeat of a key mention
            if m in ids:
                matched[m] = ids[m]
            kept.append(m)
        if kept:
            walked.append(kept)
    twinless = {}
    for m in (m for entity in walked for m in entity if m not in matched):
        twinless.setdefault(m, len(ids) + len(twinless))
    keys = [[ids[m] for m in entity] for entity in key]
    responses = [[matched.get(m, twinless.get(m)) for m in entity] for entity in walked]
    chain_of = {i: n for n, chain in enumerate(keys) for i in chain}

    # MUC: a response position counts a correct link when a later position shares its key chain.
    correct = sum(
        any(i in chain_of and chain_of.get(j) == chain_of[i] for j in chain[p + 1 :])
        for chain in responses
        for p, i in enumerate(chain)
    )
    muc_counts = (correct, sum(len(k) - 1 for k in keys), correct, sum(len(r) - 1 for r in responses))

    # B³: each response position scores the positions of its chain found in its key chain.
    recall = precision = R(0)
    for chain in responses:
        for i in chain:
            key_chain = keys[chain_of[i]] if i in chain_of else []
            common = sum(j in key_chain for j in chain)
            precision += R(common, len(chain))
            recall += R(common, len(key_chain)) if key_chain else 0
    b3_counts = (recall, sum(map(len, keys)), precision, sum(map(len, responses)))

    # CEAF-φ4: the best one-to-one alignment, every one tried; the shorter side padded with
    # empty chains, which align with similarity 0.
    size = max(len(keys), len(responses))
    padded_keys = keys + [[]] * (size - len(keys))
    padded_responses = responses + [[]] * (size - len(responses))

    def phi(k: list, r: list) -> R:
        return R(2 * sum(i in r for i in k), len(k) + len(r)) if k or r else R(0)

    best = max(
        sum(phi(k, padded_responses[j]) for k, j in zip(padded_keys, order, strict=True))
        for order in itertools.permutations(range(size))
    )
    ceaf_counts = (best, len(keys), best, len(responses))
    return {"muc": muc_counts, "b_cubed": b3_counts, "ceaf_e": ceaf_counts}


def counts(scores: dict) -> dict[str, tuple]:
    return {name: (s.recall_num, s.recall_den, s.precision_num, s.precision_den) for name, s in scores.items()}


def test_random_responses_with_repeats_score_as_the_transcribed_scorer():
    rng = random.Random(7)
    metrics = dict(zip(METRICS, (muc, b_cubed, ceaf_e), strict=True))
    changed = 0
    for _ in range(300):
        mentions = [(i, i) for i in range(8)]
        rng.shuffle(mentions)
        cut1, cut2 = sorted(rng.sample(range(1, 8), 2))
        key = [mentions[:cut1], mentions[cut1:cut2], mentions[cut2:]]
        # Up to 4 response entities over 12 spans (8 to 11 in no key entity), drawn with repeats.
        response = [[(s, s) for s in rng.choices(range(12), k=rng.randint(1, 4))] for _ in range(rng.randint(1, 4))]
        expected = {name: pytest.approx(tuple(map(float, v))) for name, v in reference_counts(key, response).items()}
        assert counts(score_document(key, response, drop_key_singletons=False)) == expected, (key, response)
        deduplicated = normalize_clusters(response)
        changed += counts({n: f(normalize_clusters(key), deduplicated) for n, f in metrics.items()}) != expected
    assert changed > 30  # the draws do hold twinless repeats, which dropping every repeat scores otherwise
