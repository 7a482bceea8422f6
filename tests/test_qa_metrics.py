"""QA metrics (normalisation, exact match, F1) and span selection, on worked examples and
against brute force."""

import numpy as np
import pytest
import torch

from data_prep.qa import find_answer_spans
from longformer_fs.evaluation.qa_metrics import exact_match, f1_score, normalize_answer, qa_scores
from longformer_fs.evaluation.qa_spans import best_span, best_span_over_windows


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Beatles!", "beatles"),
        ("  the   BEATLES ", "beatles"),
        ("Sgt. Pepper's Lonely Hearts", "sgt pepper s lonely hearts"),
        ("Los_Angeles", "los angeles"),  # TriviaQA: underscores are spaces
        ("A Tale of Two Cities", "tale of two cities"),
        ("an apple, the end", "apple end"),
        ("Theatre and Anne", "theatre and anne"),  # articles only as whole words
        ("“Quoted” — dash", "quoted dash"),  # Unicode punctuation too
        ("Café Ünïcode", "café ünïcode"),
        ("!!!", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_takes_the_best_alias():
    assert exact_match("beatles", ["The Beatles!"]) == 1.0
    assert exact_match("The Fab Four", ["The Beatles", "Fab Four"]) == 1.0
    assert exact_match("Beatles band", ["The Beatles", "Fab Four"]) == 0.0
    assert exact_match("", []) == 1.0  # an unanswerable question: the empty answer is right
    assert exact_match("Liverpool", []) == 0.0


def test_f1_by_hand():
    # prediction words [fab, four, band], gold [fab, four]: 2 shared; P = 2/3, R = 1, F1 = 0.8
    assert f1_score("the Fab Four band", ["Fab Four"]) == pytest.approx(0.8)
    # [john, lennon] vs [john, winston, lennon]: 2 shared; P = 1, R = 2/3 -> 0.8. Against
    # [lennon]: P = 1/2, R = 1 -> 2/3. The best alias counts.
    assert f1_score("John Lennon", ["Lennon", "John Winston Lennon"]) == pytest.approx(0.8)
    # A repeated word is shared as often as both sides have it: "new new york" vs "new york"
    # share new x1 and york x1; P = 2/3, R = 1 -> 0.8.
    assert f1_score("new new york", "New York") == pytest.approx(0.8)
    assert f1_score("Paris", ["London"]) == 0.0
    assert f1_score("the", ["an"]) == 1.0  # both normalise to nothing


def test_qa_scores_average_and_count_missing():
    examples = [
        {"id": "a", "answers": ["The Beatles"]},
        {"id": "b", "answers": ["Fab Four"]},
        {"id": "c", "answers": ["Liverpool"]},
        {"id": "d", "answers": ["Abbey Road"]},
    ]
    predictions = {"a": "beatles", "b": "the Fab Four band", "c": "London", "z": "ignored"}
    scores = qa_scores(predictions, examples)
    assert scores["count"] == 4 and scores["missing"] == 1
    assert scores["exact_match"] == pytest.approx(100 * 1 / 4)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8 + 0 + 0) / 4)


def test_answer_spans_use_the_same_normalisation():
    context = "The Beatles' song; beatles-mania. Not thebeatles, but THE BEATLES."
    spans = find_answer_spans(context, ["The Beatles", "beatles"])
    assert [context[a:b] for a, b in spans] == ["Beatles", "beatles", "BEATLES"]
    for a, b in spans:
        assert exact_match(context[a:b], ["The Beatles"]) == 1.0


# ---------------------------------------------------------------- spans


def brute_force(start, end, max_answer_tokens, allowed):
    best = (-np.inf, -1, -1)
    for s in range(len(start)):
        for e in range(s, min(s + max_answer_tokens, len(start))):
            if allowed[s] and allowed[e] and start[s] + end[e] > best[0]:
                best = (start[s] + end[e], s, e)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_best_span_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    start, end = rng.normal(size=n), rng.normal(size=n)
    allowed = rng.random(n) < 0.7
    allowed[rng.integers(n)] = True
    for max_answer_tokens in (1, 3, 17, n + 5):
        score, s, e = best_span(torch.from_numpy(start), torch.from_numpy(end), max_answer_tokens, allowed)
        expected = brute_force(start, end, max_answer_tokens, allowed)
        assert (s, e) == expected[1:] and score == pytest.approx(expected[0])
        assert s <= e < s + max_answer_tokens and allowed[s] and allowed[e]


def test_best_span_never_picks_a_disallowed_or_reversed_pair():
    start = np.array([9.0, 0.0, 0.0, 5.0])
    end = np.array([0.0, 8.0, 0.0, 0.0])
    assert best_span(start, end, 4, [False, True, True, True])[1:] == (1, 1)  # 0 would score 17
    assert best_span(start, end, 4, [True, True, True, True])[1:] == (0, 1)
    # The best end (1) lies before the best start (3): no reversed spans.
    assert best_span(start, end, 4, [False, True, False, True]) == (8.0, 1, 1)
    with pytest.raises(ValueError, match="no position is allowed"):
        best_span(start, end, 4, [False] * 4)


def word_windows(context, question_tokens, window, stride):
    """Windows of a whitespace tokenization: per window, offsets as prep qa writes them."""
    words, position = [], 0
    for word in context.split(" "):
        words.append((position, position + len(word)))
        position += len(word) + 1
    windows = []
    for first in range(0, len(words), stride):
        doc = words[first : first + window]
        outside = [(-1, -1)] * (question_tokens + 2)
        windows.append(np.array(outside + doc + [(-1, -1)]).reshape(-1))
        if first + window >= len(words):
            break
    return windows


def test_best_span_over_windows_maps_to_the_exact_context_text():
    context = "Paul and John met in Liverpool . The band was later called The Beatles by everyone ."
    windows = word_windows(context, question_tokens=3, window=6, stride=4)
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=len(w) // 2 + 5) for w in windows]  # + 5: padding, ignored
    ends = [rng.normal(size=len(w) // 2 + 5) for w in windows]
    # Make "The Beatles" (document words 11-12) the answer in the window that holds both.
    k = next(i for i, w in enumerate(windows) if context.index("The Beatles") in w.reshape(-1, 2)[:, 0])
    chars = windows[k].reshape(-1, 2)
    s = int(np.flatnonzero(chars[:, 0] == context.index("The Beatles"))[0])
    starts[k][s] += 10
    ends[k][s + 1] += 10
    prediction = best_span_over_windows(starts, ends, windows, context, max_answer_tokens=4)
    assert (
        prediction.text == "The Beatles" and prediction.window == k and (prediction.start, prediction.end) == (s, s + 1)
    )
    assert context[prediction.char_start : prediction.char_end] == prediction.text
    # Questions and separators never answer: a huge logit there changes nothing.
    starts[k][0] += 100
    ends[k][1] += 100
    assert best_span_over_windows(starts, ends, windows, context, 4).text == "The Beatles"


def test_best_span_over_windows_is_the_best_of_each_window():
    context = " ".join(f"w{i}" for i in range(30))
    windows = word_windows(context, question_tokens=2, window=8, stride=5)
    rng = np.random.default_rng(1)
    starts = [rng.normal(size=len(w) // 2) for w in windows]
    ends = [rng.normal(size=len(w) // 2) for w in windows]
    prediction = best_span_over_windows(starts, ends, windows, context, max_answer_tokens=3)
    per_window = []
    for w, st, en in zip(windows, starts, ends, strict=True):
        chars = w.reshape(-1, 2)
        score, s, e = brute_force(st, en, 3, chars[:, 0] >= 0)
        per_window.append((score, context[chars[s, 0] : chars[e, 1]]))
    assert (prediction.score, prediction.text) == max(per_window)
    assert best_span_over_windows([[0.0, 0.0]], [[0.0, 0.0]], [[-1, -1, -1, -1]], "", 3) is None
