"""``eval-qa`` on TriviaQA's release as ``prep qa`` prepares it: the official evaluation's
keys (``triviaqa_evaluation.py`` with ``utils/dataset_utils.py`` of mandarjoshi90/triviaqa),
the verified subsets it scores, and the prediction file of a test split without answers.

The scores are worked by hand from answers stubbed per example; the test split runs a
tiny random Longformer imported from HF transformers, for the file's format only."""

import json
from pathlib import Path

import pytest
from helpers import PreparedSplit, cli, fails, ok

from data_prep.gpt2_bpe import train_bpe
from longformer_fs.evaluation.qa_spans import SpanPrediction

PAGES = {
    "wikipedia/Andrew_Lloyd_Webber.txt": "Andrew Lloyd Webber wrote Sunset Boulevard. It opened in London.",
    "wikipedia/The_Beatles.txt": "The Beatles were a rock band from Liverpool. They recorded Abbey Road.",
    "wikipedia/Liverpool.txt": "Liverpool is a port city in England.",
    "web/35/35_995.txt": "Sunset Boulevard had its American premiere in December 1993.",
    "web/12/12_4.txt": "The Beatles recorded Abbey Road in 1969.",
}


def page(filename: str, verified: bool = True) -> dict:
    return {"DocSource": "TagMe", "Filename": filename, "Title": filename[:-4], "DocPartOfVerifiedEval": verified}


def result(filename: str, rank: int, verified: bool = True) -> dict:
    return {"Description": "...", "DisplayUrl": "www.example.org", "Filename": filename, "Rank": rank,
            "Title": f"Result {rank}", "Url": f"http://www.example.org/{rank}",
            "DocPartOfVerifiedEval": verified}  # fmt: skip


def question(qid, text, aliases, pages, results=None, verified=True) -> dict:
    """A ``Data`` entry of the release; ``aliases`` None: no ``Answer`` (a test file)."""
    entry = {"QuestionId": qid, "Question": text, "EntityPages": pages, "QuestionPartOfVerifiedEval": verified,
             "QuestionSource": "http://trivia.example/"}  # fmt: skip
    if aliases is not None:
        entry["Answer"] = {"Aliases": aliases, "NormalizedAliases": [a.lower() for a in aliases], "Value": aliases[0],
                           "Type": "WikipediaEntity"}  # fmt: skip
    if results is not None:
        entry["SearchResults"] = results
    return entry


MUSICAL = ("tc_33", "Which Lloyd Webber musical premiered in the US in December 1993?", ["Sunset Boulevard"])
BAND = ("tc_51", "Which band recorded Abbey Road?", ["The Beatles", "Beatles"])
CITY = ("tc_77", "Which city did the Beatles come from?", ["Liverpool"])

FILES = {
    # tc_77 is not part of the verified evaluation; tc_33's second page is not verified, which
    # the Wikipedia domain ignores: it scores questions.
    "verified-wikipedia-dev.json": ("Wikipedia", True, [
        question(*MUSICAL, [page("Andrew_Lloyd_Webber.txt"), page("The_Beatles.txt", verified=False)]),
        question(*BAND, [page("The_Beatles.txt")]),
        question(*CITY, [page("Liverpool.txt")], verified=False),
    ]),
    # The Web domain scores (question, document) pairs: tc_33's entity page is left out.
    "verified-web-dev.json": ("Web", True, [
        question(*MUSICAL, [page("Andrew_Lloyd_Webber.txt", verified=False)], [result("35/35_995.txt", 0)]),
        question(*BAND, [page("The_Beatles.txt")], [result("12/12_4.txt", 0)]),
    ]),
    "wikipedia-test-without-answers.json": ("Wikipedia", False, [
        question(MUSICAL[0], MUSICAL[1], None, [page("Andrew_Lloyd_Webber.txt"), page("The_Beatles.txt")]),
        question(BAND[0], BAND[1], None, [page("The_Beatles.txt")]),
    ]),
}  # fmt: skip


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    directory = tmp_path_factory.mktemp("triviaqa-rc")
    for name, text in PAGES.items():
        (directory / "evidence" / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / "evidence" / name).write_text(text)
    (directory / "qa").mkdir()
    for name, (domain, verified, data) in FILES.items():
        split = "test" if "test" in name else "dev"
        release = {"Data": data, "Domain": domain, "VerifiedEval": verified, "Version": 1.0, "Split": split}
        (directory / "qa" / name).write_text(json.dumps(release))
    return directory


def prep_qa(release: Path, tokenizer: list, out: Path, max_tokens: int = 4096, **files) -> Path:
    splits = [arg for split, name in files.items() for arg in (f"--{split}", release / "qa" / name)]
    ok("prep", "qa", "--format", "triviaqa", "--evidence", release / "evidence", *splits, *tokenizer,
       "--max-tokens", max_tokens, "--out", out)  # fmt: skip
    return out


# ---------------------------------------------------------------- scores, the model's answers stubbed


@pytest.fixture(scope="module")
def prepared(release, tmp_path_factory):
    d = tmp_path_factory.mktemp("prepared")
    train_bpe([*PAGES.values(), MUSICAL[1], BAND[1], CITY[1]] * 2, d, 200)
    tokenizer = ["--encoder-json", d / "encoder.json", "--vocab-bpe", d / "vocab.bpe", "--dict", d / "dict.txt"]
    return prep_qa(release, tokenizer, d / "data", valid="verified-wikipedia-dev.json", test="verified-web-dev.json")


def stubbed(monkeypatch, answers: dict[str, tuple[str, float]]) -> None:
    """eval-qa's model answering ``answers`` (example id -> (text, score))."""
    from longformer_fs.commands import eval_qa

    predictions = {k: SpanPrediction(text, score, 0, 0, 0, 0, 0) for k, (text, score) in answers.items()}
    monkeypatch.setattr(eval_qa, "load_model", lambda checkpoint, data, device: (None, PreparedSplit(data)))
    monkeypatch.setattr(eval_qa, "predict_answers", lambda *args: predictions)


def test_verified_wikipedia_is_scored_per_question_over_the_verified_questions_only(prepared, monkeypatch, tmp_path):
    stubbed(monkeypatch, {
        "tc_33--Andrew_Lloyd_Webber.txt": ("Sunset Boulevard", 5.0),  # the question's best: right
        "tc_33--The_Beatles.txt": ("Abbey Road", 2.0),
        "tc_51--The_Beatles.txt": ("Beatles band", 1.0),  # [beatles band] vs [beatles]: P 1/2, R 1, F1 2/3
    })  # fmt: skip
    official, per_example = tmp_path / "official.json", tmp_path / "examples.json"
    argv = ["eval-qa", tmp_path / "model.pt", "--data", prepared, "--predictions", per_example]
    scores = json.loads(ok(*argv, "--official-predictions", official, "--json"))
    # Two questions: tc_77 is outside the verified evaluation. Read as every other question
    # (as before), and answered right, it made EM 66.67 and F1 (1 + 2/3 + 1) / 3 = 88.89.
    assert scores["official"] == "questions" and scores["questions"]["count"] == 2
    assert scores["questions"]["exact_match"] == 50.0
    assert scores["questions"]["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert scores["examples"]["count"] == 3 and scores["examples"]["exact_match"] == pytest.approx(100 / 3)
    # The official file is per QuestionId (what triviaqa_evaluation.py reads); --predictions per example.
    assert json.loads(official.read_text()) == {"tc_33": "Sunset Boulevard", "tc_51": "Beatles band"}
    assert json.loads(per_example.read_text()) == {
        "tc_33--Andrew_Lloyd_Webber.txt": "Sunset Boulevard",
        "tc_33--The_Beatles.txt": "Abbey Road",
        "tc_51--The_Beatles.txt": "Beatles band",
    }
    printed = ok(*argv).splitlines()
    assert printed[1].startswith("valid (examples): EM 33.33  F1 ") and printed[1].endswith("prediction)")
    assert printed[2] == (
        "valid (questions): EM 50.00  F1 83.33  over 2 questions (0 without a prediction), the official score"
    )


def test_verified_web_is_scored_per_question_and_document(prepared, monkeypatch, tmp_path):
    stubbed(monkeypatch, {
        "tc_33--35/35_995.txt": ("Sunset Boulevard", 1.0),
        "tc_51--The_Beatles.txt": ("Liverpool", 9.0),  # a question's best answer does not stand for its others
        "tc_51--12/12_4.txt": ("The Beatles", 0.5),
    })  # fmt: skip
    official = tmp_path / "official.json"
    argv = ["eval-qa", tmp_path / "model.pt", "--data", prepared, "--split", "test", "--official-predictions"]
    scores = json.loads(ok(*argv, official, "--json"))
    assert scores["official"] == "examples" and "questions" not in scores
    assert scores["examples"]["count"] == 3 and scores["examples"]["exact_match"] == pytest.approx(200 / 3)
    assert json.loads(official.read_text()) == {
        "tc_33--35/35_995.txt": "Sunset Boulevard",
        "tc_51--The_Beatles.txt": "Liverpool",
        "tc_51--12/12_4.txt": "The Beatles",
    }


# ---------------------------------------------------------------- a test split, through a tiny model


def test_a_test_split_without_answers_gets_its_official_prediction_file(release, tmp_path):
    from hf_models import save_model, train_tokenizer, vocab_size
    from transformers import LongformerConfig, LongformerForQuestionAnswering

    tokenizer = train_tokenizer([*PAGES.values(), MUSICAL[1], BAND[1]] * 4, tmp_path / "tokenizer", 300)
    config = LongformerConfig(vocab_size=vocab_size(tokenizer), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, attention_window=[4, 8],
                              max_position_embeddings=98, type_vocab_size=1, layer_norm_eps=1e-5)  # fmt: skip
    save_model(LongformerForQuestionAnswering(config).eval(), tokenizer, tmp_path / "hf")
    model = tmp_path / "model"
    ok("import-hf", tmp_path / "hf", "--out", model)
    tokenizer_args = ["--encoder-json", model / "encoder.json", "--vocab-bpe", model / "vocab.bpe"]
    data = prep_qa(release, [*tokenizer_args, "--dict", model / "dict.txt"], tmp_path / "data", max_tokens=96,
                   test="wikipedia-test-without-answers.json")  # fmt: skip
    argv = ["eval-qa", model / "model.pt", "--data", data, "--split", "test", "--device", "cpu"]

    error = fails(*argv)  # before any window runs: nothing to score, nothing asked for
    assert error.strip().endswith(
        f"{data}: split test has no answers to score against (prepared from a file released without them); "
        "give --official-predictions FILE to write the answers to submit"
    )
    official = tmp_path / "wikipedia-predictions.json"
    printed = ok(*argv, "--official-predictions", official)
    assert (
        printed.strip()
        == f"test: not scored, its examples come without answers; the answers to its 2 questions are in {official}"
    )
    answers = json.loads(official.read_text())
    assert list(answers) == ["tc_33", "tc_51"]
    pages = {"tc_33": [PAGES["wikipedia/Andrew_Lloyd_Webber.txt"], PAGES["wikipedia/The_Beatles.txt"]],
             "tc_51": [PAGES["wikipedia/The_Beatles.txt"]]}  # fmt: skip
    for qid, text in answers.items():  # a random model's span, cut from one of the question's pages
        assert text and any(text in page for page in pages[qid])
    assert json.loads(cli(*argv, "--official-predictions", official, "--json").stdout)["scored"] is False


def test_a_split_prepared_before_keys_were_recorded_is_keyed_per_question():
    from longformer_fs.evaluation.qa import official_level, official_predictions

    examples = [{"id": "tc_33--A.txt", "answers": ["x"]}, {"id": "tc_33--B.txt", "answers": ["x"]}]
    predictions = {"tc_33--A.txt": SpanPrediction("a", 1.0, 0, 0, 0, 0, 0), "tc_33--B.txt": None}
    assert official_level(examples, "triviaqa") == "questions" and official_level(examples, "squad") == "examples"
    assert official_predictions(predictions, examples, "triviaqa") == {"tc_33": "a"}
    assert official_predictions(predictions, examples, "squad") == {"tc_33--A.txt": "a", "tc_33--B.txt": ""}
