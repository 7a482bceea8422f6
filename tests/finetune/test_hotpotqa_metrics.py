"""HotpotQA's official metrics (hotpot_evaluate_v1.py) on examples worked by hand from the
script's rules: answer EM/F1 with SQuAD's normalisation and the yes/no/noanswer rule,
supporting-fact sets, the joint products, and corpus means with missing predictions."""

import pytest

from longformer_fs.conventions import SQUAD
from longformer_fs.evaluation.hotpotqa_metrics import (
    METRIC_NAMES,
    NORMALIZATION,
    Match,
    answer_match,
    hotpotqa_scores,
    joint_match,
    supporting_facts_match,
)

# ---------------------------------------------------------------- the joint F1, by hand
# Gold answer "the Eiffel Tower in Paris", normalised "eiffel tower in paris" (4 words;
# "the" dropped). Predicted "Eiffel Tower, Paris!", normalised "eiffel tower paris" (3
# words; the comma and "!" deleted). Shared: eiffel, tower, paris = 3.
#   answer precision 3/3 = 1, recall 3/4, F1 = 2·1·(3/4)/(1 + 3/4) = 6/7; EM 0.
# Gold facts {(Eiffel Tower, 0), (Paris, 2)}; predicted {(Eiffel Tower, 0), (Paris, 1),
# (France, 3)}: shared 1.
#   sp precision 1/3, recall 1/2, F1 = 2·(1/3)·(1/2)/(1/3 + 1/2) = (1/3)/(5/6) = 2/5; EM 0.
# Joint precision 1 · 1/3 = 1/3, joint recall 3/4 · 1/2 = 3/8,
#   joint F1 = 2·(1/3)·(3/8)/(1/3 + 3/8) = (1/4)/(17/24) = 6/17; joint EM 0.
GOLD = {
    "_id": "q1",
    "answer": "the Eiffel Tower in Paris",
    "supporting_facts": [["Eiffel Tower", 0], ["Paris", 2]],
}
PREDICTED_ANSWER = "Eiffel Tower, Paris!"
PREDICTED_SP = [["Eiffel Tower", 0], ["Paris", 1], ["France", 3]]


def test_joint_f1_worked_by_hand():
    answer = answer_match(PREDICTED_ANSWER, GOLD["answer"])
    assert answer == pytest.approx(Match(em=0, f1=6 / 7, precision=1, recall=3 / 4))
    sp = supporting_facts_match(PREDICTED_SP, GOLD["supporting_facts"])
    assert sp == pytest.approx(Match(em=0, f1=2 / 5, precision=1 / 3, recall=1 / 2))
    assert joint_match(answer, sp) == pytest.approx(Match(em=0, f1=6 / 17, precision=1 / 3, recall=3 / 8))

    scores = hotpotqa_scores({"answer": {"q1": PREDICTED_ANSWER}, "sp": {"q1": PREDICTED_SP}}, [GOLD])
    expected = [0, 6 / 7, 1, 3 / 4, 0, 2 / 5, 1 / 3, 1 / 2, 0, 6 / 17, 1 / 3, 3 / 8]
    assert [scores[name] for name in METRIC_NAMES] == pytest.approx([100 * v for v in expected])
    assert (scores["count"], scores["missing_answer"], scores["missing_sp"]) == (1, 0, 0)


def test_metric_names_are_the_official_scripts():
    assert METRIC_NAMES == (
        "em", "f1", "prec", "recall",
        "sp_em", "sp_f1", "sp_prec", "sp_recall",
        "joint_em", "joint_f1", "joint_prec", "joint_recall",
    )  # fmt: skip


def test_joint_em_needs_both_exact():
    exact = Match(1, 1, 1, 1)
    half = supporting_facts_match([["A", 0]], [["A", 0], ["B", 1]])  # P 1, R 1/2
    assert joint_match(exact, half) == pytest.approx(Match(em=0, f1=2 / 3, precision=1, recall=1 / 2))
    assert joint_match(exact, exact) == exact
    assert joint_match(Match(0, 0, 0, 0), exact) == Match(0, 0, 0, 0)


# ---------------------------------------------------------------- yes / no / noanswer

YES_NO = [
    # prediction, gold, EM, F1
    ("yes", "yes", 1, 1),
    ("Yes.", "yes", 1, 1),  # normalised first: "yes"
    ("yes", "no", 0, 0),
    # Plain word F1 would give these partial credit; the official rule gives 0 when
    # either side is yes/no/noanswer and they differ.
    ("yes it is", "yes", 0, 0),  # plain: P 1/3, R 1 -> 1/2
    ("no", "no way", 0, 0),  # plain: P 1, R 1/2 -> 2/3
    ("noanswer", "noanswer today", 0, 0),
    ("no answer", "no", 0, 0),
    # "no answer" normalises to two words, not to "noanswer", and "an answer" to "answer":
    # ordinary word F1, P 1/2, R 1.
    ("no answer", "an answer", 0, 2 / 3),
]


@pytest.mark.parametrize("prediction, gold, em, f1", YES_NO)
def test_yes_no_answers_get_no_partial_credit(prediction, gold, em, f1):
    got = answer_match(prediction, gold)
    assert (got.em, got.f1) == pytest.approx((em, f1))


# ---------------------------------------------------------------- SQuAD's normalisation

PUNCTUATION = [
    # prediction, gold, EM, F1: SQuAD's convention deletes punctuation (TriviaQA's would
    # turn it into spaces, so "rock-n-roll" would equal "rock n roll" there).
    ("U.S.A.", "USA", 1, 1),
    ("1,000 km", "1000 km", 1, 1),
    ("rock-n-roll", "rock n roll", 0, 0),  # "rocknroll" shares no word with "rock n roll"
    ("Sgt. Pepper's", "sgt peppers", 1, 1),
    ("The Beatles", "Beatles!", 1, 1),
    # Two answers that normalise to nothing are equal (EM 1) but share no word (F1 0), as
    # the official script has it (SQuAD 2.0's would give F1 1).
    ("the", "!", 1, 0),
    ("", "", 1, 0),
]


@pytest.mark.parametrize("prediction, gold, em, f1", PUNCTUATION)
def test_answers_are_compared_after_squads_normalisation(prediction, gold, em, f1):
    got = answer_match(prediction, gold)
    assert (got.em, got.f1) == pytest.approx((em, f1))


def test_the_normalisation_is_the_shared_squad_convention():
    assert NORMALIZATION is SQUAD


def test_answer_f1_counts_repeated_words_as_a_multiset():
    # "paris paris" vs "paris": shared min(2, 1) = 1, P 1/2, R 1, F1 2/3.
    assert answer_match("Paris Paris", "Paris") == pytest.approx(Match(0, 2 / 3, 1 / 2, 1))


# ---------------------------------------------------------------- supporting facts


def test_supporting_facts_are_sets_of_pairs():
    gold = [["A", 0], ["B", 1]]
    assert supporting_facts_match([("B", 1), ["A", 0], ["A", 0]], gold) == Match(1, 1, 1, 1)
    assert supporting_facts_match([["A", "0"]], [["A", 0]]) == Match(0, 0, 0, 0)  # compared as given
    # Nothing predicted: precision 0 (not 0/0), recall 0.
    assert supporting_facts_match([], gold) == Match(0, 0, 0, 0)
    # Both empty: the sets are equal (EM 1), and every ratio is 0 over an empty set.
    assert supporting_facts_match([], []) == Match(1, 0, 0, 0)


# ---------------------------------------------------------------- corpus means


def test_missing_predictions_score_zero_and_count_in_the_mean():
    examples = [
        {"_id": "a", "answer": "yes", "supporting_facts": [["T", 0]]},
        {"_id": "b", "answer": "Paris", "supporting_facts": [["P", 1]]},
        {"_id": "c", "answer": "no", "supporting_facts": [["Q", 2]]},
    ]
    predictions = {
        # "a" perfect; "b" no answer but right facts; "c" the right answer but no facts.
        "answer": {"a": "yes", "c": "no", "unknown": "ignored"},
        "sp": {"a": [["T", 0]], "b": [["P", 1]], "unknown": []},
    }
    scores = hotpotqa_scores(predictions, examples)
    # Each sum is over 3 examples: answer 1 (a) + 0 (b, missing) + 1 (c).
    assert scores["em"] == scores["f1"] == pytest.approx(200 / 3)
    # Facts: 1 (a) + 1 (b) + 0 (c, missing).
    assert scores["sp_em"] == scores["sp_f1"] == pytest.approx(200 / 3)
    # Jointly only "a" has both: 1/3.
    for name in ("joint_em", "joint_f1", "joint_prec", "joint_recall"):
        assert scores[name] == pytest.approx(100 / 3)
    assert (scores["count"], scores["missing_answer"], scores["missing_sp"]) == (3, 1, 1)


def test_the_corpus_mean_is_over_examples_not_pooled_counts():
    examples = [
        {"_id": "long", "answer": "one two three four", "supporting_facts": []},
        {"_id": "short", "answer": "five", "supporting_facts": []},
    ]
    # Per example: "one two" against 4 words, P 1, R 1/2, F1 2/3; "five", F1 1. The mean F1 is
    # (2/3 + 1)/2 = 5/6; pooling the words (3 shared of 3 predicted, 5 gold) would give 3/4.
    scores = hotpotqa_scores({"answer": {"long": "one two", "short": "five"}, "sp": {}}, examples)
    assert scores["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert scores["recall"] == pytest.approx(100 * (1 / 2 + 1) / 2)


def test_no_examples_and_no_predictions():
    assert hotpotqa_scores({}, []) == {
        **dict.fromkeys(METRIC_NAMES, 0.0),
        "count": 0,
        "missing_answer": 0,
        "missing_sp": 0,
    }
    scores = hotpotqa_scores({}, [GOLD])
    assert all(scores[name] == 0 for name in METRIC_NAMES)
    assert (scores["missing_answer"], scores["missing_sp"]) == (1, 1)
