"""QA metrics (each dataset's normalisation, exact match, F1) and span selection, on examples
worked by hand from the official scripts and against brute force."""

import json

import numpy as np
import pytest
import torch
from helpers import PreparedSplit, cli

from data_prep.gpt2_bpe import train_bpe
from data_prep.qa_sources import find_answer_spans
from longformer_fs.evaluation.qa_metrics import NORMALIZATIONS, SQUAD, TRIVIAQA, exact_match, f1_score, qa_scores
from longformer_fs.evaluation.qa_spans import best_span, best_span_over_windows

# Each row worked by hand from the official scripts' definitions. Both: lower case, articles
# a/an/the removed as words after the punctuation step, white space collapsed. SQuAD
# (evaluate-v2.0.py): the characters of string.punctuation deleted. TriviaQA
# (triviaqa_evaluation.py): "_", string.punctuation and the quotes ‘ ’ ´ turned into spaces.
NORMALISED = [
    # text, SQuAD, TriviaQA
    ("The Beatles!", "beatles", "beatles"),
    ("  the   BEATLES ", "beatles", "beatles"),
    ("1,000 km", "1000 km", "1 000 km"),
    ("U.S.A.", "usa", "u s"),  # TriviaQA: "u s a", and then "a" is an article
    ("don't stop", "dont stop", "don t stop"),
    ("Los_Angeles", "losangeles", "los angeles"),
    ("the-end", "theend", "end"),
    ("(a) b", "b", "b"),
    ("Sgt. Pepper\u2019s", "sgt pepper\u2019s", "sgt pepper s"),  # ’ is no ASCII punctuation
    ("rock \u00b4n\u00b4 roll", "rock \u00b4n\u00b4 roll", "rock n roll"),
    ("\u201cQuoted\u201d \u2014 dash", "\u201cquoted\u201d \u2014 dash", "\u201cquoted\u201d \u2014 dash"),
    ("Theatre and Anne", "theatre and anne", "theatre and anne"),  # articles only as whole words
    ("An\u00a0apple\tpie", "apple pie", "apple pie"),  # any white space
    ("Caf\u00e9 \u00dcn\u00efcode", "caf\u00e9 \u00fcn\u00efcode", "caf\u00e9 \u00fcn\u00efcode"),
    ("!!!", "", ""),
]


@pytest.mark.parametrize("text, squad, triviaqa", NORMALISED)
def test_each_convention_normalises_as_its_official_script(text, squad, triviaqa):
    assert SQUAD.normalize(text) == squad
    assert TRIVIAQA.normalize(text) == triviaqa


def test_each_dataset_has_its_convention():
    assert NORMALIZATIONS == {"squad": SQUAD, "triviaqa": TRIVIAQA, "hotpotqa": SQUAD}


# Eight predictions: four SQuAD calls right, three TriviaQA does.
EIGHT = [
    # prediction, gold, SQuAD EM, TriviaQA EM, TriviaQA F1
    ("1000 km", "1,000 km", 1, 0, 0.4),  # [1000 km] vs [1 000 km]: km shared, P 1/2, R 1/3
    ("USA", "U.S.A.", 1, 0, 0.0),  # [usa] vs [u s]
    ("dont know", "don't know", 1, 0, 0.4),  # [dont know] vs [don t know]: know shared
    ("the Beatles", "Beatles", 1, 1, 1.0),
    ("Los Angeles", "Los_Angeles", 0, 1, 1.0),
    ("Paris", "London", 0, 0, 0.0),
    ("rock and roll", "rock-and-roll", 0, 1, 1.0),
    ("", "Moon", 0, 0, 0.0),
]


def test_eight_predictions_score_by_each_official_convention():
    examples = [{"id": str(i), "answers": [gold]} for i, (_, gold, *_) in enumerate(EIGHT)]
    predictions = {str(i): prediction for i, (prediction, *_) in enumerate(EIGHT)}
    for prediction, gold, squad_em, triviaqa_em, triviaqa_f1 in EIGHT:
        assert exact_match(prediction, [gold], SQUAD) == squad_em
        assert f1_score(prediction, [gold], SQUAD) == squad_em  # all or nothing on these
        assert exact_match(prediction, [gold], TRIVIAQA) == triviaqa_em
        assert f1_score(prediction, [gold], TRIVIAQA) == pytest.approx(triviaqa_f1)
    squad = qa_scores(predictions, examples, SQUAD)
    triviaqa = qa_scores(predictions, examples, TRIVIAQA)
    assert (squad["exact_match"], squad["f1"]) == (50.0, 50.0)
    assert triviaqa["exact_match"] == 37.5 and triviaqa["f1"] == pytest.approx(100 * 3.8 / 8)


def test_exact_match_takes_the_best_alias():
    for normalization in (SQUAD, TRIVIAQA):
        assert exact_match("beatles", ["The Beatles!"], normalization) == 1.0
        assert exact_match("The Fab Four", ["The Beatles", "Fab Four"], normalization) == 1.0
        assert exact_match("Beatles band", ["The Beatles", "Fab Four"], normalization) == 0.0
        assert exact_match("", [], normalization) == 1.0  # an unanswerable question: the empty answer is right
        assert exact_match("Liverpool", [], normalization) == 0.0


def test_f1_by_hand():
    for normalization in (SQUAD, TRIVIAQA):
        # prediction words [fab, four, band], gold [fab, four]: 2 shared; P = 2/3, R = 1, F1 = 0.8
        assert f1_score("the Fab Four band", ["Fab Four"], normalization) == pytest.approx(0.8)
        # [john, lennon] vs [john, winston, lennon]: P = 1, R = 2/3 -> 0.8; against [lennon]:
        # P = 1/2, R = 1 -> 2/3. The best alias counts.
        assert f1_score("John Lennon", ["Lennon", "John Winston Lennon"], normalization) == pytest.approx(0.8)
        # A repeated word is shared as often as both sides have it: P = 2/3, R = 1 -> 0.8.
        assert f1_score("new new york", "New York", normalization) == pytest.approx(0.8)
        assert f1_score("Paris", ["London"], normalization) == 0.0
    # "the 1,000-km race" vs "1000 km race". SQuAD: [1000km race] vs [1000 km race], race
    # shared: P 1/2, R 1/3 -> 0.4. TriviaQA: [1 000 km race] vs [1000 km race], km and race
    # shared: P 2/4, R 2/3 -> 4/7.
    assert f1_score("the 1,000-km race", "1000 km race", SQUAD) == pytest.approx(0.4)
    assert f1_score("the 1,000-km race", "1000 km race", TRIVIAQA) == pytest.approx(4 / 7)
    # Both sides normalise to nothing: SQuAD 2.0's script scores that 1 (a right "no
    # answer"), TriviaQA's 0 (no word in common).
    assert f1_score("the", ["an"], SQUAD) == 1.0
    assert f1_score("the", ["an"], TRIVIAQA) == 0.0


def test_qa_scores_average_and_count_missing():
    examples = [
        {"id": "a", "answers": ["The Beatles"]},
        {"id": "b", "answers": ["Fab Four"]},
        {"id": "c", "answers": ["Liverpool"]},
        {"id": "d", "answers": ["Abbey Road"]},
    ]
    predictions = {"a": "beatles", "b": "the Fab Four band", "c": "London", "z": "ignored"}
    scores = qa_scores(predictions, examples, TRIVIAQA)
    assert scores["count"] == 4 and scores["missing"] == 1
    assert scores["exact_match"] == pytest.approx(100 * 1 / 4)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8 + 0 + 0) / 4)


def test_words_carry_the_characters_they_came_from():
    text = "U.S.A. X\u0130y the_Beatles"  # "\u0130".lower() is two characters: offsets must not drift
    assert TRIVIAQA.words(text) == [("u", 0, 1), ("s", 2, 3), ("xi\u0307y", 7, 10), ("beatles", 15, 22)]
    assert [text[a:b] for _, a, b in SQUAD.words(text)] == ["U.S.A.", "X\u0130y", "the_Beatles"]


def test_answer_spans_use_the_same_normalisation():
    context = "The Beatles' song; beatles-mania. Not thebeatles, but THE BEATLES."
    spans = find_answer_spans(context, ["The Beatles", "beatles"])
    assert [context[a:b] for a, b in spans] == ["Beatles", "beatles", "BEATLES"]
    for a, b in spans:
        assert exact_match(context[a:b], ["The Beatles"], TRIVIAQA) == 1.0


# ---------------------------------------------------------------- eval-qa picks the convention


@pytest.mark.parametrize("data_format, exact_match", [("squad", 4 / 8), ("triviaqa", 3 / 8)])
def test_eval_qa_scores_by_the_convention_the_data_records(tmp_path, monkeypatch, data_format, exact_match):
    """The eight answers above, prepared by ``prep qa`` in each format and scored by eval-qa
    with the model's answers stubbed: the format in the manifest picks the convention."""
    from longformer_fs.commands import eval_qa
    from longformer_fs.evaluation.qa_spans import SpanPrediction

    context = " ".join(f"{gold}." for _, gold, *_ in EIGHT)
    if data_format == "squad":
        qas = [
            {"id": str(i), "question": f"Q{i}?", "answers": [{"text": gold, "answer_start": context.index(gold)}]}
            for i, (_, gold, *_) in enumerate(EIGHT)
        ]
        (tmp_path / "dev.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
        extra = []
    else:
        (tmp_path / "evidence" / "wikipedia").mkdir(parents=True)
        (tmp_path / "evidence" / "wikipedia" / "page.txt").write_text(context)
        entries = [
            {
                "QuestionId": str(i),
                "Question": f"Q{i}?",
                "Answer": {"Aliases": [gold]},
                "EntityPages": [{"Filename": "page.txt"}],
            }
            for i, (_, gold, *_) in enumerate(EIGHT)
        ]
        (tmp_path / "dev.json").write_text(json.dumps({"Data": entries}))
        extra = ["--evidence", tmp_path / "evidence"]
    train_bpe([context] * 4, tmp_path, 200)
    tokenizer = [
        "--encoder-json",
        tmp_path / "encoder.json",
        "--vocab-bpe",
        tmp_path / "vocab.bpe",
        "--dict",
        tmp_path / "dict.txt",
    ]
    data = tmp_path / "data"
    prepared = cli(
        "prep", "qa", "--format", data_format, "--valid", tmp_path / "dev.json", *extra, *tokenizer, "--out", data
    )
    assert prepared.returncode == 0, prepared.stderr

    ids = [e["id"] for e in PreparedSplit(data).examples("valid")]
    answers = {i.split("--")[0]: SpanPrediction(EIGHT[int(i.split("--")[0])][0], 1.0, 0, 0, 0, 0, 0) for i in ids}
    monkeypatch.setattr(eval_qa, "load_model", lambda checkpoint, data, device: (None, PreparedSplit(data)))
    monkeypatch.setattr(eval_qa, "predict_answers", lambda *args: {i: answers[i.split("--")[0]] for i in ids})
    result = cli("eval-qa", tmp_path / "model.pt", "--data", data)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    description = {"squad": "punctuation is deleted", "triviaqa": "punctuation and underscores become spaces"}
    assert lines[0] == (
        f"answers normalised by the official {data_format} convention ({description[data_format]}): "
        f"{data / 'prep.json'} records {data_format} data"
    )
    assert lines[1].startswith(f"valid (examples): EM {100 * exact_match:.2f}  ")
    scores = json.loads(cli("eval-qa", tmp_path / "model.pt", "--data", data, "--json").stdout)
    assert scores["normalization"] == data_format and scores["examples"]["exact_match"] == 100 * exact_match


def test_eval_qa_needs_a_finished_prep_qa_directory(tmp_path):
    result = cli("eval-qa", tmp_path / "model.pt", "--data", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"longformer-fs: error: {tmp_path}: no prep.json of a finished `prep qa` run; "
        "prepare the data with longformer-fs prep qa"
    )


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
