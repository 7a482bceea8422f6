"""``eval-hotpotqa`` on HotpotQA's files as released: the test file, prepared without labels,
gets HotpotQA's prediction file (the hotpotqa/hotpot README's "Prediction File Format")
and no score; a full-wiki dev file, whose gold facts point at paragraphs the retriever
missed, is scored against its records as given. The checkpoint is a tiny random
``longformer_roberta`` with the task's heads, built here: the formats are under test, not
the answers."""

import json

import pytest
from helpers import TINY_ROBERTA, USER_DIR, fails, ok
from releases import HOTPOT_FULLWIKI

from data_prep.gpt2_bpe import train_bpe
from longformer_fs.evaluation.hotpotqa_metrics import hotpotqa_scores

# hotpot_dev_fullwiki_v1.json's layout (tests/releases.py): record 0's retrieved paragraphs
# miss one gold title, record 1 has no paragraph.
DEV_FULLWIKI = [HOTPOT_FULLWIKI[0], HOTPOT_FULLWIKI[2]]
# hotpot_test_fullwiki_v1.json's layout: "_id", "question", "context" only.
TEST_FULLWIKI = [
    {
        "_id": "5a8b57f25542995d1e6f1372",
        "question": "Which city is the head office of the Oberoi Group in?",
        "context": [
            ["The Oberoi Group", ["The Oberoi Group is a hotel company.", " Its head office is in Delhi."]],
            ["Arthur's Magazine", ["Arthur's Magazine was an American literary periodical."]],
        ],
    },
    {"_id": "5a8b57f25542995d1e6f1373", "question": "Who directed Ed Wood?", "context": []},
]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The two files prepared as --valid and --test, and a random checkpoint for them."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from longformer_fs.fairseq_format import save_start_checkpoint

    tmp = tmp_path_factory.mktemp("hotpot_release_eval")
    records = DEV_FULLWIKI + TEST_FULLWIKI
    train_bpe([r["question"] + " " + " ".join(t + " " + " ".join(s) for t, s in r["context"]) for r in records] * 20,
              tmp, 300)  # fmt: skip
    for name, data in (("dev.json", DEV_FULLWIKI), ("test.json", TEST_FULLWIKI)):
        (tmp / name).write_text(json.dumps(data))
    ok("prep", "hotpotqa", "--valid", tmp / "dev.json", "--test", tmp / "test.json", "--encoder-json",
       tmp / "encoder.json", "--vocab-bpe", tmp / "vocab.bpe", "--dict", tmp / "dict.txt",
       "--out", tmp / "data")  # fmt: skip
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(tmp / "data"), "--user-dir", str(USER_DIR), "--task", "longformer_hotpotqa", "--arch", "longformer_roberta",
        *TINY_ROBERTA, "--max-positions", "256", "--attention-window", "8"])  # fmt: skip
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    save_start_checkpoint({"cfg": cfg}, task.build_model(cfg.model).state_dict(), tmp / "model.pt")
    return tmp, task


def check_prediction_file(path, records):
    """HotpotQA's format: an answer text and a list of [title, sentence index] per _id, the
    facts among the question's own sentences."""
    predictions = json.loads(path.read_text())
    assert set(predictions) == {"answer", "sp"}
    ids = [r["_id"] for r in records]
    assert list(predictions["answer"]) == ids and list(predictions["sp"]) == ids
    for record in records:
        assert isinstance(predictions["answer"][record["_id"]], str)
        sentences = {(title, i) for title, text in record["context"] for i in range(len(text))}
        facts = predictions["sp"][record["_id"]]
        assert all(isinstance(f, list) and len(f) == 2 and (f[0], f[1]) in sentences for f in facts)
        assert bool(facts) == bool(record["context"])  # at least one fact where there are sentences
    return predictions


def test_the_test_split_gets_a_prediction_file_and_no_score(release):
    tmp, _ = release
    base = [tmp / "model.pt", "--data", tmp / "data", "--split", "test", "--device", "cpu"]
    out = ok("eval-hotpotqa", *base, "--predictions", tmp / "test_pred.json")
    assert out.strip() == f"test: 2 questions, not scored (prepared without labels); wrote {tmp / 'test_pred.json'}"
    check_prediction_file(tmp / "test_pred.json", TEST_FULLWIKI)
    assert json.loads(ok("eval-hotpotqa", *base, "--json", "--predictions", tmp / "p.json")) == {
        "count": 2,
        "scored": False,
    }
    # A run whose predictions nobody would keep is refused before it predicts.
    err = fails("eval-hotpotqa", *base)
    assert "--split test:" in err and "cannot be scored; give --predictions FILE" in err


def test_a_labelled_split_is_scored_against_its_records_as_given(release):
    tmp, _ = release
    scores = json.loads(ok("eval-hotpotqa", tmp / "model.pt", "--data", tmp / "data", "--split", "valid",
                           "--device", "cpu", "--json", "--predictions", tmp / "dev_pred.json"))  # fmt: skip
    predictions = check_prediction_file(tmp / "dev_pred.json", DEV_FULLWIKI)
    # As hotpot_evaluate_v1.py scores the file against hotpot_dev_fullwiki_v1.json: every
    # gold fact counts, the ones outside the retrieved paragraphs too.
    assert scores == hotpotqa_scores(predictions, DEV_FULLWIKI) and scores["count"] == 2
    assert scores["sp_recall"] <= 25  # at most one of record 0's two gold facts is in its context


def test_fairseq_training_refuses_the_test_split(release):
    _, task = release
    with pytest.raises(ValueError, match="test: .* without labels .* predict it with eval-hotpotqa"):
        task.load_dataset("test")
    assert not task.load_dataset("test", allow_unlabelled=True).labelled
    assert task.load_dataset("valid").labelled
    batch = task.dataset("test").collater([task.dataset("test")[i] for i in range(2)])
    assert "qtype" not in batch and batch["paragraph_mask"].sum() == 2
