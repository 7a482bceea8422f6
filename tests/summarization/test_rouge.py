"""ROUGE (:mod:`longformer_fs.evaluation.rouge`, ``longformer-fs rouge``) on examples counted
by hand, and the sentence splitter that plain-text summaries go through."""

import json

import pytest

from longformer_fs.cli import main as cli
from longformer_fs.conventions import split_sentences
from longformer_fs.evaluation.rouge import rouge_scores


def f1(precision, recall):
    return 100 * 2 * precision * recall / (precision + recall)


def test_identical_summaries_score_100():
    scores = rouge_scores(["Windows slide.\nBands are fast."], ["Windows slide.\nBands are fast."])
    for metric in ("rouge1", "rouge2", "rougeLsum"):
        assert scores[metric] == pytest.approx({"precision": 100, "recall": 100, "f1": 100})
    assert scores["documents"] == 1


def test_unigram_and_bigram_overlap_counted_by_hand():
    # reference: the cat sat on the mat (6 tokens); hypothesis: the cat lay on the red mat (7).
    # Unigrams in common (clipped counts): the x2, cat, on, mat = 5 -> P 5/7, R 5/6.
    # Bigrams: reference 5, hypothesis 6; in common "the cat", "on the" = 2 -> P 2/6, R 2/5.
    scores = rouge_scores(["the cat lay on the red mat"], ["The cat sat on the mat."])
    assert scores["rouge1"]["precision"] == pytest.approx(100 * 5 / 7)
    assert scores["rouge1"]["recall"] == pytest.approx(100 * 5 / 6)
    assert scores["rouge1"]["f1"] == pytest.approx(f1(5 / 7, 5 / 6))
    assert scores["rouge2"]["f1"] == pytest.approx(f1(2 / 6, 2 / 5))
    # Longest common subsequence: the cat on the mat = 5 tokens.
    assert scores["rougeLsum"]["f1"] == pytest.approx(f1(5 / 7, 5 / 6))


def test_lsum_matches_sentence_by_sentence():
    # The same words with the two sentences swapped. As one sentence each, the longest common
    # subsequence is one clause (3 of 6 tokens): 50. One sentence per line, each reference
    # sentence finds its match in the hypothesis: 100. ROUGE-1 cannot tell the two apart.
    reference = "the cat sat\nthe dog ran"
    hypothesis = "the dog ran\nthe cat sat"
    split = rouge_scores([hypothesis], [reference])
    joined = rouge_scores([hypothesis.replace("\n", " ")], [reference.replace("\n", " ")])
    assert split["rougeLsum"]["f1"] == pytest.approx(100)
    assert joined["rougeLsum"]["f1"] == pytest.approx(50)
    assert split["rouge1"]["f1"] == joined["rouge1"]["f1"] == pytest.approx(100)


def test_porter_stemmer_matches_word_forms():
    scores = rouge_scores(["Runs with dogs"], ["running with dog"])
    assert scores["rouge1"]["f1"] == pytest.approx(100)
    assert scores["rouge2"]["f1"] == pytest.approx(100)
    unrelated = rouge_scores(["Runs with dogs"], ["walking near cats"])
    assert unrelated["rouge1"]["f1"] == 0


def test_mean_over_documents_and_count_mismatch():
    scores = rouge_scores(["bands are fast", "nothing alike"], ["bands are fast", "windows slide"])
    assert scores["rouge1"]["f1"] == pytest.approx(50) and scores["documents"] == 2
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        rouge_scores(["a b", "c d"], ["a b"])
    with pytest.raises(ValueError, match="no documents"):
        rouge_scores([], [])


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("We slide. They band! Do they? Yes.", ["We slide.", "They band!", "Do they?", "Yes."]),
        (
            "See Fig. 3, e.g. the U.S. data of J. Smith et al. in 2020. Done.",
            ["See Fig. 3, e.g. the U.S. data of J. Smith et al. in 2020.", "Done."],
        ),
        (
            "It takes approx. three steps. Then \u201cquoted.\u201d (Bracketed.) End",
            ["It takes approx. three steps.", "Then \u201cquoted.\u201d", "(Bracketed.)", "End"],
        ),
        ("we study x . we show y .", ["we study x .", "we show y ."]),  # lowercased, tokenized corpora
        ("He joined the Dept. of Physics. It grew.", ["He joined the Dept. of Physics.", "It grew."]),
        ("line one\nline two. still two", ["line one", "line two.", "still two"]),  # no capitals anywhere
        ("Version 3.5 ships. Wait... Really?! Ok.", ["Version 3.5 ships.", "Wait...", "Really?!", "Ok."]),
        ("  ", []),
    ],
)
def test_sentence_splitter(text, sentences):
    assert split_sentences(text) == sentences


def run(capsys, *args):
    code = cli(["rouge", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_reads_references_jsonl_and_plain_text(tmp_path, capsys):
    # Our references.jsonl layout, and hypotheses one per line that the splitter breaks into
    # the reference's sentences: every metric is 100 only if the sentences line up.
    refs = tmp_path / "test.references.jsonl"
    refs.write_text(
        json.dumps({"id": "p1", "reference": "the dog ran\nthe cat sat"})
        + "\n"
        + json.dumps({"id": "p2", "reference": "Bands are fast."})
        + "\n"
    )
    hyps = tmp_path / "hyp.txt"
    hyps.write_text("The cat sat. The dog ran.\nBands are fast.\n")
    code, out, _ = run(capsys, "--hyp", hyps, "--ref", refs, "--json")
    scores = json.loads(out)
    assert code == 0 and scores["documents"] == 2
    assert scores["rougeLsum"]["f1"] == pytest.approx(100)

    code, out, _ = run(capsys, "--hyp", hyps, "--ref", refs, "--verbose")
    assert code == 0 and "documents: 2" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["ROUGE-1", "ROUGE-2", "ROUGE-Lsum"]
    assert out.splitlines()[1].split() == ["P", "R", "F1"]

    # summarize --out's .jsonl ("summary"), sentences as a list.
    hyp_jsonl = tmp_path / "hyp.jsonl"
    hyp_jsonl.write_text(
        json.dumps({"id": "p1", "summary": ["the cat sat", "the dog ran"]}) + "\n\n" + json.dumps({"summary": "x"})
    )
    code, out, _ = run(capsys, "--hyp", hyp_jsonl, "--ref", refs, "--json")
    scores = json.loads(out)
    assert code == 0 and scores["rougeLsum"]["f1"] == pytest.approx(50)  # 100 and 0


def test_cli_clear_errors(tmp_path, capsys):
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps({"id": "a", "reference": "x"}) + "\n" + json.dumps({"id": "b", "reference": "y"}) + "\n")
    one = tmp_path / "one.txt"
    one.write_text("x\n")
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text(json.dumps({"id": "b", "summary": "y"}) + "\n" + json.dumps({"id": "a", "summary": "x"}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "summary": "x"}\n{not json\n')
    for args, message in [
        (["--hyp", one, "--ref", refs], "1 hypotheses but 2 references"),
        (["--hyp", refs, "--ref", refs], "refs.jsonl:1: no field 'summary'"),
        (["--hyp", swapped, "--ref", refs], "swapped.jsonl:1 has id 'b' but"),
        (["--hyp", bad, "--ref", refs], "bad.jsonl:2: malformed JSON"),
        (["--hyp", tmp_path / "missing.txt", "--ref", refs], "missing.txt: not found"),
    ]:
        code, _, err = run(capsys, *args)
        assert code == 2 and message in err and err.startswith("longformer-fs: error:"), err
