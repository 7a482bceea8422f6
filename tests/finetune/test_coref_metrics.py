"""MUC, B³ and CEAF-φ4 against the worked examples of the reference coreference scorer,
examples worked by hand from the papers' definitions, and brute force.

The published cases are those of conll/reference-coreference-scorers (v8), test/:
TestCases.README gives each case's key and response in set notation, with the expected
recall and precision, and CorefMetricTestConfig.pm the same numbers as the scorer's test
suite checks them ([recall, precision, F1], as fractions or to 5 decimals). The reference
scorer scores keys as given, singletons included, so these cases pass
``drop_key_singletons=False``.
"""

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest

from longformer_fs.evaluation import coref_metrics
from longformer_fs.evaluation.coref_metrics import (
    METRICS,
    CorefEvaluator,
    Score,
    b_cubed,
    ceaf_e,
    conll_f1,
    max_weight_assignment,
    muc,
    normalize_clusters,
    score_document,
)

# ---------------------------------------------------------------- the mentions
# TC-A's key file (DataFiles/TC-A.key) holds two sentences, test1 (9 tokens) and test2
# (11 tokens): a = test1 tokens 0-1, b = test1 3-6, c = test2 0, d = test2 2-3,
# e = test2 5, f = test2 7-9. As (start, end) document spans, test2 starting at token 9:
a, b, c, d, e, f = (0, 1), (3, 6), (9, 9), (11, 12), (14, 14), (16, 18)
# Response mentions the key lacks (twinless): x, y, z; and B, a different span that
# overlaps b (TC-A-5 and TC-A-6: "overlapping mention B").
x, y, z = (20, 20), (21, 22), (24, 24)
B = (4, 6)

TC_A_KEY = [[a], [b, c], [d, e, f]]
TC_M_KEY = [[a, b, c, d, e, f]]
TC_N_KEY = [[a], [b], [c], [d], [e], [f]]


def one_token(*entities: str) -> list[list[tuple[int, int]]]:
    """Clusters written as the README writes them, one character per one-token mention:
    ``one_token("12345", "67")`` is [[(0, 0) ... (4, 4)], [(5, 5), (6, 6)]] (the character's
    place in "123456789ABCDEFGHIJ" is its token)."""
    position = {ch: i for i, ch in enumerate("123456789ABCDEFGHIJ")}
    return [[(position[ch], position[ch]) for ch in entity] for entity in entities]


def f1(recall, precision):
    return 2 * recall * precision / (recall + precision) if recall + precision else 0


# Luo's ratios exactly: the README's sums of φ4 (common = Σ φ4 over the best alignment).
CEAF_A3 = 1 + Fraction(4, 5) + Fraction(6, 7)
CEAF_A4 = 1 + Fraction(4, 5) + Fraction(2, 5)  # A4, and A6 to A9
CEAF_A5 = 1 + Fraction(4, 6) + Fraction(2, 5)
A4_B3 = (Fraction(10, 3) / 6, (1 + Fraction(4, 3) + Fraction(1, 2)) / 7)  # A4, A7, A8, A9 (de-duplicated)

R = Fraction  # expected values as exact fractions where the test config writes fractions

# (case, key, response, {metric: (recall, precision, F1)}); an F1 of None is 2PR/(P+R).
PUBLISHED = [
    # TC-A-1: perfect.
    ("A1", TC_A_KEY, [[a], [b, c], [d, e, f]], {"muc": (1, 1, 1), "b_cubed": (1, 1, 1), "ceaf_e": (1, 1, 1)}),
    # TC-A-2: response with missing mentions/entities.
    (
        "A2",
        TC_A_KEY,
        [[a], [d, e]],
        {"muc": (R(1, 3), 1, R(1, 2)), "b_cubed": (R(7, 3) / 6, 1, R(14, 25)), "ceaf_e": (0.6, 0.9, 0.72)},
    ),
    # TC-A-3: response with false-alarm mentions/entities (x, y, z are twinless).
    (
        "A3",
        TC_A_KEY,
        [[a], [b, c, x], [d, e, f, y], [z]],
        {
            "muc": (1, R(3, 5), 0.75),
            "b_cubed": (1, (4 + R(7, 12)) / 9, R(110, 163)),
            "ceaf_e": (CEAF_A3 / 3, CEAF_A3 / 4, None),
        },
    ),
    # TC-A-4: both missing and false-alarm mentions/entities.
    (
        "A4",
        TC_A_KEY,
        [[a], [b, c, x], [d, y], [z]],
        {"muc": (R(1, 3), R(1, 3), R(1, 3)), "b_cubed": (*A4_B3, None), "ceaf_e": (CEAF_A4 / 3, CEAF_A4 / 4, None)},
    ),
    # TC-A-5: as A4, plus B, overlapping b but not b, in the entity aligned with {b, c}.
    (
        "A5",
        TC_A_KEY,
        [[a], [b, c, x, B], [d, y], [z]],
        {
            "muc": (R(1, 3), R(1, 4), R(2, 7)),
            "b_cubed": (R(10, 3) / 6, R(5, 2) / 8, None),
            "ceaf_e": (CEAF_A5 / 3, CEAF_A5 / 4, None),
        },
    ),
    # TC-A-6: as A4, plus the overlapping B in an unaligned entity.
    (
        "A6",
        TC_A_KEY,
        [[a], [b, c, x], [d, y], [B, z]],
        {
            "muc": (R(1, 3), R(1, 4), R(2, 7)),
            "b_cubed": (R(10, 3) / 6, (1 + R(4, 3) + R(1, 2)) / 8, None),
            "ceaf_e": (CEAF_A4 / 3, CEAF_A4 / 4, None),
        },
    ),
    # TC-A-7: b repeated in its own entity; de-duplicated, the response is A4's.
    (
        "A7",
        TC_A_KEY,
        [[a], [b, c, x, b], [d, y], [z]],
        {"muc": (R(1, 3), R(1, 3), R(1, 3)), "b_cubed": (*A4_B3, None), "ceaf_e": (CEAF_A4 / 3, CEAF_A4 / 4, None)},
    ),
    # TC-A-8: b repeated in another entity; de-duplicated (the first entity keeps it), A4's.
    (
        "A8",
        TC_A_KEY,
        [[a], [b, c, x], [d, y], [b, z]],
        {"muc": (R(1, 3), R(1, 3), R(1, 3)), "b_cubed": (*A4_B3, None), "ceaf_e": (CEAF_A4 / 3, CEAF_A4 / 4, None)},
    ),
    # TC-A-9: "B3 can be canned": b repeated 10 times in another entity; de-duplicated, A4's.
    (
        "A9",
        TC_A_KEY,
        [[a], [b, c, x], [d, y], [b] * 10 + [z]],
        {"muc": (R(1, 3), R(1, 3), R(1, 3)), "b_cubed": (*A4_B3, None), "ceaf_e": (CEAF_A4 / 3, CEAF_A4 / 4, None)},
    ),
    # TC-A-10: gold mentions, only singletons in the response (MUC 0/0 counts as 0).
    ("A10", TC_A_KEY, [[a], [b], [c], [d], [e], [f]], {"muc": (0, 0, 0), "b_cubed": (R(3, 6), 1, R(2, 3))}),
    # TC-A-11: gold mentions, all coreferent in the response.
    (
        "A11",
        TC_A_KEY,
        [[a, b, c, d, e, f]],
        {"muc": (1, R(3, 5), R(6, 8)), "b_cubed": (1, (R(1, 6) + 2 * R(2, 6) + 3 * R(3, 6)) / 6, R(14, 25))},
    ),
    # TC-A-12: system mentions (twinless x, y, z), only singletons in the response.
    (
        "A12",
        TC_A_KEY,
        [[a], [x], [y], [c], [d], [e], [z]],
        {"muc": (0, 0, 0), "b_cubed": ((1 + R(1, 2) + R(2, 3)) / 6, R(4, 7), None)},
    ),
    # TC-A-13: system mentions, all merged into one response entity.
    (
        "A13",
        TC_A_KEY,
        [[a, x, y, c, d, e, z]],
        {
            "muc": (R(1, 3), R(1, 6), R(2, 9)),
            "b_cubed": ((1 + R(1, 2) + 2 * R(2, 3)) / 6, (R(1, 7) + R(1, 7) + 2 * R(2, 7)) / 7, None),
        },
    ),
    # TC-D-1 (from the B-cubed paper, Bagga and Baldwin 1998): merging a small cluster with a big one.
    (
        "D1",
        one_token("12345", "67", "89ABC"),
        one_token("12345", "6789ABC"),
        {"muc": (1, R(9, 10), None), "b_cubed": (1, R(16, 21), None)},
    ),
    # TC-E-1 (B-cubed paper): merging the two big clusters.
    (
        "E1",
        one_token("12345", "67", "89ABC"),
        one_token("1234589ABC", "67"),
        {"muc": (1, R(9, 10), None), "b_cubed": (1, R(7, 12), None)},
    ),
    # TC-F-1 to TC-L-1: examples from the MUC paper (Vilain et al. 1995). Key links A-B, B-C, C-D.
    ("F1", one_token("ABCD"), one_token("AB", "CD"), {"muc": (R(2, 3), 1, None)}),
    ("G1", one_token("AB", "CD"), one_token("ABCD"), {"muc": (1, R(2, 3), None)}),
    # TC-H-1 and TC-I-1: the key's links are A-B, B-C, B-D, the same entity as F1's: MUC
    # scores entities, not the links that happen to be written down.
    ("H1", one_token("ABCD"), one_token("ABCD"), {"muc": (1, 1, 1)}),
    ("I1", one_token("ABCD"), one_token("AB", "CD"), {"muc": (R(2, 3), 1, None)}),
    ("J1", one_token("ABC"), one_token("AC"), {"muc": (R(1, 2), 1, None)}),
    # TC-K-1: A, F and I are twinless response mentions.
    ("K1", one_token("BCDEGHJ"), one_token("ABC", "DEF", "GHI"), {"muc": (R(3, 6), R(3, 6), R(3, 6))}),
    # TC-L-1: E is a key mention the response lacks, H a response mention the key lacks.
    ("L1", one_token("ABC", "DEFG"), one_token("AB", "CD", "FGH"), {"muc": (R(2, 5), R(2, 4), None)}),
    # TC-M: only coreferent mentions in the key.
    (
        "M1",
        TC_M_KEY,
        [[a, b, c, d, e, f]],
        {"muc": (1, 1, 1), "b_cubed": (1, 1, 1), "ceaf_e": (1, 1, 1)},
    ),
    ("M2", TC_M_KEY, [[a], [b], [c], [d], [e], [f]], {"muc": (0, 0, 0)}),
    ("M5", TC_M_KEY, [[a], [b], [c], [x], [y], [z]], {"muc": (0, 0, 0)}),
    # TC-N: only singletons in the key.
    (
        "N1",
        TC_N_KEY,
        [[a], [b], [c], [d], [e], [f]],
        {"muc": (0, 0, 0), "b_cubed": (1, 1, 1), "ceaf_e": (1, 1, 1)},
    ),
    ("N2", TC_N_KEY, [[a, b, c, d, e, f]], {"muc": (0, 0, 0)}),
    ("N4", TC_N_KEY, [[a], [b], [c], [x], [y], [z]], {"muc": (0, 0, 0)}),
]


@pytest.mark.parametrize("case, key, response, expected", PUBLISHED, ids=[case[0] for case in PUBLISHED])
def test_published_cases_of_the_reference_scorer(case, key, response, expected):
    scores = score_document(key, response, drop_key_singletons=False)
    for metric, (recall, precision, f) in expected.items():
        if f is None:
            f = f1(recall, precision)
        got = scores[metric]
        assert (got.recall, got.precision, got.f1) == pytest.approx(
            (float(recall), float(precision), float(f)), abs=1e-12
        ), f"TC-{case}: {metric}"


# CorefMetricTestConfig.pm writes CEAF-φ4 to 5 decimals; the exact ratios above must round to them.
CEAF_TO_5_DECIMALS = [
    ("A2", [[a], [d, e]], (0.6, 0.9, 0.72)),
    ("A3", [[a], [b, c, x], [d, e, f, y], [z]], (0.88571, 0.66429, 0.75918)),
    ("A4", [[a], [b, c, x], [d, y], [z]], (0.73333, 0.55, 0.62857)),
    ("A5", [[a], [b, c, x, B], [d, y], [z]], (0.68889, 0.51667, 0.59048)),
    ("A6", [[a], [b, c, x], [d, y], [B, z]], (0.73333, 0.55, 0.62857)),
    ("A9", [[a], [b, c, x], [d, y], [b] * 10 + [z]], (0.73333, 0.55, 0.62857)),
]


@pytest.mark.parametrize("case, response, expected", CEAF_TO_5_DECIMALS, ids=[c[0] for c in CEAF_TO_5_DECIMALS])
def test_ceaf_e_as_the_test_config_prints_it(case, response, expected):
    got = score_document(TC_A_KEY, response, drop_key_singletons=False)["ceaf_e"]
    assert (round(got.recall, 5), round(got.precision, 5), round(got.f1, 5)) == expected


# ---------------------------------------------------------------- Luo's CEAF, by hand
# Luo (2005) illustrates CEAF on the B-cubed paper's key, {1..5} {6 7} {8..C}, scored
# against four responses. φ4 values worked here from the definition, φ4(K, R) = 2|K∩R|/(|K|+|R|):
# (a) {1..5} {6..C}:       {1..5}~{1..5} = 1, {8..C}~{6..C} = 10/12    Φ = 11/6
# (b) {1..5 8..C} {6 7}:   {1..5}~{1..5 8..C} = 10/15, {6 7}~{6 7} = 1  Φ = 5/3
# (c) {1..C}:              {1..5}~{1..C} = 10/17 (or {8..C}: the same)  Φ = 10/17
# (d) twelve singletons:   each key entity ~ one of its mentions: 2/6 + 2/3 + 2/6  Φ = 4/3
# Recall = Φ/3 key entities, precision = Φ/(response entities).
LUO_KEY = one_token("12345", "67", "89ABC")
LUO_RESPONSES = [
    ("a", one_token("12345", "6789ABC"), R(11, 6), 2),
    ("b", one_token("1234589ABC", "67"), R(5, 3), 2),
    ("c", one_token("123456789ABC"), R(10, 17), 1),
    ("d", one_token(*"123456789ABC"), R(4, 3), 12),
]


@pytest.mark.parametrize("name, response, phi, entities", LUO_RESPONSES, ids=[r[0] for r in LUO_RESPONSES])
def test_ceaf_e_on_luos_example_by_hand(name, response, phi, entities):
    got = score_document(LUO_KEY, response)["ceaf_e"]  # no key singletons here: the default changes nothing
    assert got.recall == pytest.approx(float(phi / 3))
    assert got.precision == pytest.approx(float(phi / entities))
    assert got.f1 == pytest.approx(float(2 * phi / (3 + entities)))  # Luo's F: 2Φ/(|K| + |R|)


# ---------------------------------------------------------------- singletons


def test_key_singletons_are_dropped_by_default_as_in_conll_2012():
    # TC-A-1's perfect response, scored against the key without its singleton {a}: key
    # {b c} {d e f}. MUC has no links in singletons: unchanged. B³: the response's {a} is
    # now twinless, precision (0 + 2·2/2 + 3·3/3)/6 = 5/6, recall 5/5. CEAF-φ4: Φ = 1 + 1,
    # recall 2/2, precision 2/3 response entities.
    scores = score_document(TC_A_KEY, [[a], [b, c], [d, e, f]])
    assert (scores["muc"].recall, scores["muc"].precision) == (1, 1)
    assert (scores["b_cubed"].recall, scores["b_cubed"].precision) == pytest.approx((1, 5 / 6))
    assert (scores["ceaf_e"].recall, scores["ceaf_e"].precision) == pytest.approx((1, 2 / 3))
    # Without the response's singleton, as a system trained on OntoNotes answers: perfect.
    assert all(s.f1 == 1 for s in score_document(TC_A_KEY, [[b, c], [d, e, f]]).values())


def test_a_key_of_singletons_only_scores_zero_by_default():
    scores = score_document(TC_N_KEY, [[a], [b]])
    assert all(s == Score(0, 0, s.precision_num, s.precision_den) for s in scores.values())
    assert all(s.recall == s.precision == s.f1 == 0 for s in scores.values())


def test_singletons_never_change_muc():
    rng = random.Random(0)
    for _ in range(200):
        key, response = random_partition(rng), random_partition(rng)
        singleton = [[(100 + rng.randrange(5), 0)]]
        full = muc(normalize_clusters(key), normalize_clusters(response))
        assert full == muc(normalize_clusters(key + singleton), normalize_clusters(response + singleton))
        assert full == muc(normalize_clusters(key, drop_singletons=True), normalize_clusters(response))


def test_normalize_clusters_follows_the_reference_scorers_de_duplication():
    assert normalize_clusters([[a, a, b], [b, c], [b], [d]]) == [{a, b}, {c}, {d}]
    assert normalize_clusters([[a, a, b], [b, c], [b], [d]], drop_singletons=True) == [{a, b}]
    assert normalize_clusters([]) == []


# ---------------------------------------------------------------- corpus accumulation


def test_corpus_scores_sum_counts_over_documents():
    evaluator = CorefEvaluator(drop_key_singletons=False)
    evaluator.add(TC_A_KEY, [[a], [d, e]])  # TC-A-2
    doc = evaluator.add(TC_A_KEY, [[a], [b, c, x], [d, e, f, y], [z]])  # TC-A-3
    assert doc["muc"].precision == pytest.approx(3 / 5)  # add returns the document's own scores
    totals = evaluator.totals
    # MUC: recall (1 + 3)/(3 + 3) links, precision (1 + 3)/(1 + 5).
    assert (totals["muc"].recall, totals["muc"].precision) == pytest.approx((4 / 6, 4 / 6))
    # B³: recall (7/3 + 6)/(6 + 6) key mentions, precision (3 + 55/12)/(3 + 9) response mentions.
    assert totals["b_cubed"].recall == pytest.approx((7 / 3 + 6) / 12)
    assert totals["b_cubed"].precision == pytest.approx((3 + 55 / 12) / 12)
    # CEAF-φ4: Φ summed, 1.8 + 2.657..., over 3 + 3 key and 2 + 4 response entities.
    phi = 1.8 + float(CEAF_A3)
    assert (totals["ceaf_e"].recall, totals["ceaf_e"].precision) == pytest.approx((phi / 6, phi / 6))
    # Not the mean of the documents' F1s: MUC's are 0.5 and 0.75, the corpus's 4/6.
    assert totals["muc"].f1 == pytest.approx(4 / 6)
    assert evaluator.documents == 2


def test_summary_is_in_percent_and_conll_f1_is_the_mean_of_the_three():
    evaluator = CorefEvaluator(drop_key_singletons=False)
    evaluator.add(TC_A_KEY, [[a], [b, c, x], [d, y], [z]])  # TC-A-4
    summary = evaluator.summary()
    assert summary["muc"] == pytest.approx({"precision": 100 / 3, "recall": 100 / 3, "f1": 100 / 3})
    expected = (1 / 3 + f1(*map(float, A4_B3)) + f1(float(CEAF_A4 / 3), float(CEAF_A4 / 4))) / 3
    assert summary["conll_f1"] == pytest.approx(100 * expected)
    assert evaluator.conll_f1 == pytest.approx(expected) == pytest.approx(conll_f1(evaluator.totals))
    assert summary["documents"] == 1


def test_empty_documents_score_zero():
    evaluator = CorefEvaluator()
    assert all(s == Score(0, 0, 0, 0) for s in evaluator.add([], []).values())
    assert evaluator.summary()["conll_f1"] == 0


def test_scores_add():
    assert Score(1, 2, 3, 4) + Score(1, 1, 1, 1) == Score(2, 3, 4, 5)
    assert Score(1, 3, 0, 0).f1 == 0 and Score(0, 0, 0, 0).recall == 0


# ---------------------------------------------------------------- properties and brute force


def random_partition(rng: random.Random, mentions: int = 8) -> list[list[tuple[int, int]]]:
    """Clusters over a random subset of ``mentions`` one-token spans."""
    chosen = [(i, i) for i in range(mentions) if rng.random() < 0.7]
    clusters: dict[int, list] = {}
    for mention in chosen:
        clusters.setdefault(rng.randrange(4), []).append(mention)
    return list(clusters.values())


def test_swapping_key_and_response_swaps_recall_and_precision():
    rng = random.Random(1)
    for _ in range(200):
        key, response = random_partition(rng), random_partition(rng)
        forward = score_document(key, response, drop_key_singletons=False)
        backward = score_document(response, key, drop_key_singletons=False)
        for name in METRICS:
            assert forward[name].recall == pytest.approx(backward[name].precision)
            assert forward[name].precision == pytest.approx(backward[name].recall)


def brute_force_ceaf_phi(key: list[frozenset], response: list[frozenset]) -> float:
    """Φ* over every one-to-one alignment (the shorter side's entities each to a distinct other)."""
    short, long_ = (key, response) if len(key) <= len(response) else (response, key)
    best = 0.0
    for chosen in itertools.permutations(range(len(long_)), len(short)):
        best = max(
            best, sum(2 * len(s & long_[j]) / (len(s) + len(long_[j])) for s, j in zip(short, chosen, strict=True))
        )
    return best


def brute_force_b_cubed_recall(key: list[frozenset], response: list[frozenset]) -> float:
    """Bagga and Baldwin's per-mention form: the mean over key mentions of |K(m) ∩ R(m)|/|K(m)|."""
    response_of = {m: r for r in response for m in r}
    shares = [len(k & response_of.get(m, frozenset())) / len(k) for k in key for m in k]
    return sum(shares) / len(shares) if shares else 0.0


def test_ceaf_e_and_b_cubed_equal_brute_force():
    rng = random.Random(2)
    for _ in range(300):
        key = normalize_clusters(random_partition(rng))
        response = normalize_clusters(random_partition(rng))
        assert ceaf_e(key, response).recall_num == pytest.approx(brute_force_ceaf_phi(key, response))
        assert b_cubed(key, response).recall == pytest.approx(brute_force_b_cubed_recall(key, response))


def brute_force_assignment(weights: np.ndarray) -> float:
    rows, cols = weights.shape
    if rows > cols:
        return brute_force_assignment(weights.T)
    return max(
        (sum(weights[i, j] for i, j in enumerate(p)) for p in itertools.permutations(range(cols), rows)), default=0
    )


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 5), (5, 2), (4, 6), (6, 6), (0, 3)])
def test_own_hungarian_equals_scipy_and_brute_force(shape):
    rng = np.random.default_rng(sum(shape))
    for trial in range(20):
        weights = rng.random(shape)
        if trial % 2:  # ties and zeros, as φ4 matrices have
            weights = np.round(weights * 3) / 3
        best = brute_force_assignment(weights)
        if weights.size:
            rows, cols = coref_metrics._hungarian(weights)
            assert len(set(rows)) == len(set(cols)) == min(shape)
            assert weights[rows, cols].sum() == pytest.approx(best)
        rows, cols = max_weight_assignment(weights)
        assert weights[rows, cols].sum() == pytest.approx(best)


def test_ceaf_e_without_scipy_uses_the_own_assignment(monkeypatch):
    monkeypatch.setattr(coref_metrics, "_scipy_assignment", None)
    scores = score_document(TC_A_KEY, [[a], [b, c, x], [d, e, f, y], [z]], drop_key_singletons=False)
    assert scores["ceaf_e"].recall == pytest.approx(float(CEAF_A3 / 3))
