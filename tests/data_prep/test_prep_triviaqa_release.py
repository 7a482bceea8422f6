"""``prep qa --format triviaqa`` on files in the layout of TriviaQA's release
(``triviaqa-rc.tar.gz``: ``qa/*.json`` and ``evidence/{wikipedia,web}/``), written here
from the format's documentation and sample (``samples/triviaqa_sample.json`` of
mandarjoshi90/triviaqa): Wikipedia and Web files, verified dev files, a test file without
answers, and a question without evidence. What is kept follows the official reader
(``utils/dataset_utils.py``)."""

import json
from pathlib import Path

import pytest
from helpers import fails, ok
from releases import BAND, CITY, MONA, SUNSET, SUNSET_GOLD, WEB, WIKIPEDIA, write_triviaqa_release

from data_prep.gpt2_bpe import train_bpe


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_triviaqa_release(tmp_path_factory.mktemp("triviaqa-rc"))


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    texts = [*WIKIPEDIA.values(), *WEB.values(), SUNSET[1], BAND[1], CITY[1], MONA[1]]
    train_bpe(texts * 2, d, 300)
    return d


def tokenizer_args(d: Path) -> list:
    return ["--encoder-json", d / "encoder.json", "--vocab-bpe", d / "vocab.bpe", "--dict", d / "dict.txt"]


def prep(release: Path, bpe: Path, out: Path, **files) -> str:
    """``prep qa`` of the release's ``files`` (split -> name in qa/): what it printed."""
    splits = [arg for split, name in files.items() for arg in (f"--{split}", release / "qa" / name)]
    return ok("prep", "qa", "--format", "triviaqa", "--evidence", release / "evidence", *splits,
              *tokenizer_args(bpe), "--out", out)  # fmt: skip


def examples(out: Path, split: str) -> dict[str, dict]:
    lines = (out / f"{split}.examples.jsonl").read_text().splitlines()
    return {e["id"]: e for e in map(json.loads, lines)}


def stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def gold_texts(out: Path, split: str) -> dict[str, set[str]]:
    """Per example, the context text under each gold (start, end) of its windows."""
    from fairseq.data import data_utils

    items = {n: data_utils.load_indexed_dataset(str(out / f"{split}.{n}"), None, "mmap") for n in ("starts", "ends")}
    offsets = data_utils.load_indexed_dataset(str(out / f"{split}.offsets"), None, "mmap")
    contexts = {i: e["context"] for i, e in examples(out, split).items()}
    found: dict[str, set[str]] = {}
    for k, line in enumerate((out / f"{split}.windows.jsonl").read_text().splitlines()):
        example = json.loads(line)["id"]
        chars = offsets[k].view(-1, 2)
        spans = zip(items["starts"][k].tolist(), items["ends"][k].tolist(), strict=True)
        found.setdefault(example, set()).update(contexts[example][chars[s, 0] : chars[e, 1]] for s, e in spans)
    return found


# ---------------------------------------------------------------- Wikipedia, and a test file


def test_a_test_file_without_answers_is_written_without_gold_and_a_question_without_pages_is_counted(
    release, bpe, tmp_path
):
    out = tmp_path / "wiki"
    printed = prep(release, bpe, out, valid="wikipedia-dev.json", test="wikipedia-test-without-answers.json")
    test = examples(out, "test")
    assert list(test) == ["tc_33--Andrew_Lloyd_Webber.txt", "tc_33--Sunset_Boulevard_(musical).txt",
                          "tc_51--The_Beatles.txt"]  # fmt: skip
    assert [e["key"] for e in test.values()] == ["tc_33", "tc_33", "tc_51"]  # the official key: the QuestionId
    assert all(e["answers"] is None for e in test.values())
    assert gold_texts(out, "test") == {example: set() for example in test}
    assert test["tc_51--The_Beatles.txt"]["context"] == WIKIPEDIA["The_Beatles.txt"]
    counts = stats(out)["splits"]["test"]
    assert counts["examples"] == counts["answer_not_given"] == 3 and counts["windows"] == 3
    assert counts["answer_found"] == counts["answer_not_in_text"] == counts["occurrences"] == 0

    # VerifiedEval is false: tc_77 stays, its QuestionPartOfVerifiedEval unread; tc_90 lists no page.
    valid = examples(out, "valid")
    assert list(valid) == ["tc_33--Andrew_Lloyd_Webber.txt", "tc_33--Sunset_Boulevard_(musical).txt",
                           "tc_77--Liverpool.txt"]  # fmt: skip
    assert valid["tc_33--Andrew_Lloyd_Webber.txt"]["answers"] == SUNSET_GOLD["Aliases"]
    assert gold_texts(out, "valid")["tc_33--Andrew_Lloyd_Webber.txt"] == {"Sunset Boulevard", "Sunset Blvd"}
    where = f"{release / 'qa' / 'wikipedia-dev.json'}: Data[1] (QuestionId tc_90)"
    assert stats(out)["questions_dropped"] == {
        "count": 1,
        "by_reason": {"without evidence": 1},
        "examples": [{"origin": where, "reason": "without evidence"}],
    }
    assert stats(out)["documents_dropped"]["count"] == 0
    assert f"questions dropped: 1 (1 without evidence)\n  {where}: without evidence\n" in printed
    assert "documents dropped: 0\n" in printed


def test_a_file_without_answers_cannot_be_trained_on_or_split(release, bpe, tmp_path):
    test_file = release / "qa" / "wikipedia-test-without-answers.json"
    base = ["prep", "qa", "--format", "triviaqa", "--evidence", release / "evidence", *tokenizer_args(bpe)]
    error = fails(*base, "--train", test_file, "--out", tmp_path / "a")
    assert f"--train: {test_file} gives no question an answer (a test file" in error
    assert "give it as --test (or --valid)" in error
    assert "--input: " in fails(*base, "--input", test_file, "--out", tmp_path / "b")


# ---------------------------------------------------------------- verified dev files


def test_verified_files_keep_what_the_official_script_scores(release, bpe, tmp_path):
    out = tmp_path / "verified"
    printed = prep(release, bpe, out, valid="verified-wikipedia-dev.json", test="verified-web-dev.json")
    # Wikipedia: the verified questions, with all their pages (the evaluation keys questions).
    wiki = ["tc_33--Andrew_Lloyd_Webber.txt", "tc_33--Sunset_Boulevard_(musical).txt", "tc_51--The_Beatles.txt"]
    assert list(examples(out, "valid")) == wiki
    # Web: the verified question's verified documents, each its own key.
    web = examples(out, "test")
    assert list(web) == ["tc_33--Sunset_Boulevard_(musical).txt", "tc_33--35/35_995.txt"]
    assert [e["key"] for e in web.values()] == list(web)
    wiki_file, web_file = release / "qa" / "verified-wikipedia-dev.json", release / "qa" / "verified-web-dev.json"
    dropped = stats(out)
    assert dropped["questions_dropped"]["by_reason"] == {"outside the verified evaluation": 2}
    assert [d["origin"] for d in dropped["questions_dropped"]["examples"]] == [
        f"{wiki_file}: Data[1] (QuestionId tc_77)",
        f"{web_file}: Data[1] (QuestionId tc_51)",
    ]
    assert dropped["documents_dropped"]["examples"] == [
        {"origin": f"{web_file}: Data[0] (QuestionId tc_33): EntityPages[0] (Andrew_Lloyd_Webber.txt)",
         "reason": "outside the verified evaluation"}
    ]  # fmt: skip
    assert "questions dropped: 2 (2 outside the verified evaluation)" in printed
    assert "documents dropped: 1 (1 outside the verified evaluation)" in printed


def test_a_verified_file_without_its_flags_is_an_error_naming_the_record(release, bpe, tmp_path):
    release_json = json.loads((release / "qa" / "verified-web-dev.json").read_text())
    del release_json["Data"][0]["SearchResults"][0]["DocPartOfVerifiedEval"]
    (tmp_path / "flags.json").write_text(json.dumps(release_json))
    error = fails("prep", "qa", "--format", "triviaqa", "--evidence", release / "evidence",
                  "--valid", tmp_path / "flags.json", *tokenizer_args(bpe), "--out", tmp_path / "out")  # fmt: skip
    assert error.strip().endswith(
        f"{tmp_path / 'flags.json'}: Data[0] (QuestionId tc_33): SearchResults[0]: no 'DocPartOfVerifiedEval' key"
    )


# ---------------------------------------------------------------- the Web domain


def test_a_web_file_reads_entity_pages_and_search_results(release, bpe, tmp_path):
    out = tmp_path / "web"
    printed = prep(release, bpe, out, valid="web-dev.json")
    web = examples(out, "valid")
    assert list(web) == [
        "tc_33--Andrew_Lloyd_Webber.txt",
        "tc_33--Sunset_Boulevard_(musical).txt",
        "tc_33--35/35_995.txt",
        "tc_51--The_Beatles.txt",
        "tc_51--12/12_3.txt",
        "tc_51--12/12_4.txt",
    ]
    assert all(e["key"] == example for example, e in web.items())  # the Web domain keys (question, document)
    assert web["tc_51--12/12_4.txt"]["context"] == WEB["12/12_4.txt"]
    gold = gold_texts(out, "valid")
    assert gold["tc_51--12/12_4.txt"] == {"BEATLES", "Beatles"}  # "THE" and "the" are articles: not in the span
    assert gold["tc_33--35/35_995.txt"] == {"Sunset Boulevard"} and gold["tc_51--12/12_3.txt"] == set()
    assert stats(out)["splits"]["valid"]["answer_not_in_text"] == 1
    assert "questions dropped: 1 (1 without evidence)" in printed  # tc_90: neither pages nor results


def test_missing_web_evidence_and_an_unknown_domain_are_errors_naming_the_record(release, bpe, tmp_path):
    release_json = json.loads((release / "qa" / "web-dev.json").read_text())
    release_json["Data"][1]["SearchResults"][1]["Filename"] = "12/12_9.txt"
    (tmp_path / "missing.json").write_text(json.dumps(release_json))
    (tmp_path / "domain.json").write_text(json.dumps({**release_json, "Domain": "News"}))
    base = ["prep", "qa", "--format", "triviaqa", "--evidence", release / "evidence", *tokenizer_args(bpe)]
    error = fails(*base, "--valid", tmp_path / "missing.json", "--out", tmp_path / "a")
    missing = release / "evidence" / "web" / "12" / "12_9.txt"
    assert f"Data[1] (QuestionId tc_51): SearchResults[1]: evidence file {missing} not found" in error
    error = fails(*base, "--valid", tmp_path / "domain.json", "--out", tmp_path / "b")
    assert f"{tmp_path / 'domain.json'}: Domain is 'News'; TriviaQA's domains are Wikipedia and Web" in error


def test_a_directory_prepared_before_examples_had_keys_is_prepared_again(release, bpe, tmp_path):
    out = tmp_path / "again"
    prep(release, bpe, out, valid="wikipedia-dev.json")
    assert "up to date" in prep(release, bpe, out, valid="wikipedia-dev.json")
    manifest = json.loads((out / "prep.json").read_text())
    del manifest["inputs"]["example_fields"]  # as the manifest was written before
    (out / "prep.json").write_text(json.dumps(manifest))
    assert "up to date" not in prep(release, bpe, out, valid="wikipedia-dev.json")
