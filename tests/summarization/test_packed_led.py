"""LED on packed rows (``longformer_translation --pack``, issue #75): whole (source, target)
pairs packed first-fit into rows, each source encoded alone and each target decoded alone
against its own source; trained by fairseq-train. The oracles are fairseq's own
``translation`` batches of each pair and the model run on each pair alone."""

import json
import math
import random

import pytest
import torch
from conftest import bpe_args
from helpers import ON_CPU, TINY_BART, USER_DIR, fairseq, fairseq_json_logs, ok

from longformer_fs.tasks.packed_documents import PADDED_DOCUMENT

MAX_SOURCE = 256
WORDS = "the paper shows that a long model reads the whole text and writes a short summary of it".split()
LED = ["--arch", "led_base", *TINY_BART, "--attention-window", "4", "--max-source-positions", str(MAX_SOURCE),
       "--max-target-positions", "64", "--dropout", "0.0", "--attention-dropout", "0.0"]  # fmt: skip


@pytest.fixture(scope="module")
def data(gpt2, tmp_path_factory):
    """``prep summarization`` of articles of long-tailed lengths, each summarized by its first
    words."""
    root = tmp_path_factory.mktemp("packed_led")
    rng = random.Random(0)
    for split, count in (("train", 40), ("valid", 8)):
        rows = []
        for i in range(count):
            words = [rng.choice(WORDS) for _ in range(min(int(rng.lognormvariate(3.4, 0.8)) + 5, 200))]
            summary = " ".join(words[: rng.randint(2, 9)])
            rows.append({"id": f"{split}{i}", "source": " ".join(words), "target": summary})
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok("prep", "summarization", "--format", "jsonl", "--source-field", "source", "--target-field", "target",
       *bpe_args(gpt2), "--train", root / "train.jsonl", "--valid", root / "valid.jsonl", "--workers", "1",
       "--out", root / "data")  # fmt: skip
    return root / "data"


def setup(data, pack: bool):
    import longformer_fs.tasks  # noqa: F401 (registers the task)
    from longformer_fs.tasks.translation import LongformerTranslationConfig, LongformerTranslationTask

    cfg = LongformerTranslationConfig(data=str(data), source_lang="source", target_lang="target",
                                      max_source_positions=MAX_SOURCE, truncate_source=True, left_pad_source=False,
                                      dataset_impl="mmap", required_seq_len_multiple=1, pack=pack)  # fmt: skip
    task = LongformerTranslationTask.setup_task(cfg)
    task.load_dataset("train")
    return task, task.dataset("train")


def pairs_of(batch):
    """Each packed pair of a batch, in row order: its source, target and decoder input."""
    net_input, found = batch["net_input"], []
    for row in range(len(net_input["src_tokens"])):
        sources, targets = net_input["documents"][row], net_input["target_documents"][row]
        for doc in sources.unique().tolist():
            if doc != PADDED_DOCUMENT:
                found.append(tuple(tuple(part[row][ids == doc].tolist()) for part, ids in (
                    (net_input["src_tokens"], sources), (batch["target"], targets),
                    (net_input["prev_output_tokens"], targets))))  # fmt: skip
    return found


def alone(fairseqs, index):
    """fairseq's own batch of pair ``index`` alone."""
    return fairseqs.collater([fairseqs[index]])


def test_packed_rows_hold_each_pair_once_as_fairseq_batches_it(data):
    _, packed = setup(data, pack=True)
    _, fairseqs = setup(data, pack=False)  # fairseq's LanguagePairDataset: the oracle
    expected = []
    for i in range(len(fairseqs)):
        one = alone(fairseqs, i)
        expected.append(tuple(tuple(t[0].tolist()) for t in (one["net_input"]["src_tokens"], one["target"],
                                                           one["net_input"]["prev_output_tokens"])))  # fmt: skip
    batch = packed.collater([packed[i] for i in range(len(packed))])
    assert len(packed) < len(fairseqs) / 2  # rows hold several pairs
    assert sorted(pairs_of(batch)) == sorted(expected)
    assert batch["nsentences"] == len(fairseqs)
    assert batch["ntokens"] == sum(len(t) for _, t, _ in expected)
    assert int(batch["net_input"]["src_tokens"].ne(1).sum(dim=1).max()) <= MAX_SOURCE


def test_fairseq_train_packs_pairs_and_decodes_each_as_alone(data, tmp_path):
    log = fairseq("fairseq-train", data, "--user-dir", USER_DIR, "--task", "longformer_translation", "--pack",
                  "--source-lang", "source", "--target-lang", "target", "--truncate-source", *LED,
                  "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "2", "--required-batch-size-multiple", "1",
                  "--max-update", "3", "--save-dir", tmp_path / "save", "--no-epoch-checkpoints",
                  *ON_CPU, "--log-format", "json", "--log-interval", "1")  # fmt: skip
    entries = [entry for _, entry in fairseq_json_logs(log, ("train_inner",))]
    assert len(entries) == 3 and all(math.isfinite(float(e["loss"])) for e in entries), log[-2000:]
    assert [entry for _, entry in fairseq_json_logs(log, ("valid",))]

    from longformer_fs.checkpoint import load_model

    model, loaded = load_model(tmp_path / "save" / "checkpoint_last.pt", data)
    loaded.load_dataset("valid")
    assert loaded.dataset("valid").src is not None  # generation and summarize read pairs one by one
    _, packed = setup(data, pack=True)
    _, fairseqs = setup(data, pack=False)
    batch = packed.collater([packed[i] for i in range(len(packed))])
    net_input = batch["net_input"]
    by_source = {tuple(fairseqs[i]["source"].tolist()): i for i in range(len(fairseqs))}
    with torch.no_grad():
        logits, _ = model(**net_input)
        checked = 0
        for row in range(len(net_input["src_tokens"])):
            sources, targets = net_input["documents"][row], net_input["target_documents"][row]
            for doc in sources.unique().tolist():
                if doc == PADDED_DOCUMENT:
                    continue
                one = alone(fairseqs, by_source[tuple(net_input["src_tokens"][row][sources == doc].tolist())])
                expected, _ = model(**one["net_input"])
                torch.testing.assert_close(logits[row][targets == doc], expected[0], atol=1e-4, rtol=1e-4)
                checked += 1
        assert checked == batch["nsentences"] > len(net_input["src_tokens"])
        # Without the ids each target would read the row's other sources and targets too.
        leaky = {k: v for k, v in net_input.items() if k not in ("documents", "target_documents", "max_documents")}
        assert (model(**leaky)[0] - logits).abs().max() > 1e-3
