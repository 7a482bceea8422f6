"""``longformer_sentence_prediction --pack`` (issue #75): whole inputs packed first-fit into rows,
each classified from its own ``<s>``, trained by fairseq-train; the oracle is fairseq's own
``sentence_prediction`` dataset and the model run on each input alone."""

import json
import math
import random

import pytest
import torch
from conftest import bpe_args
from helpers import ON_CPU, TINY_ROBERTA, USER_DIR, fairseq, fairseq_json_logs, ok

from longformer_fs.tasks.packed_documents import PADDED_DOCUMENT

MAX_POSITIONS = 256
WORDS = "the review of this film says it was long and good or bad and the plot ran on".split()
CLASSIFY = ["--num-classes", "2", "--init-token", "0", "--separator-token", "2", "--shorten-method", "truncate",
            "--max-positions", str(MAX_POSITIONS)]  # fmt: skip


@pytest.fixture(scope="module")
def data(gpt2, tmp_path_factory):
    """``prep classification`` of 48 reviews of long-tailed lengths (a few past a row), each
    labelled by the cue word it ends with."""
    root = tmp_path_factory.mktemp("packed_cls")
    rng = random.Random(0)
    for split, count in (("train", 48), ("valid", 16)):
        rows = []
        for _ in range(count):
            label = rng.randrange(2)
            n = min(int(rng.lognormvariate(3.3, 0.9)) + 3, 400)
            text = " ".join(rng.choice(WORDS) for _ in range(n)) + (" good" if label else " bad")
            rows.append({"text": text, "label": label})
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok("prep", "classification", "--train", root / "train.jsonl", "--valid", root / "valid.jsonl", *bpe_args(gpt2),
       "--out", root / "data")  # fmt: skip
    return root / "data"


def setup(data, pack: bool):
    import longformer_fs.tasks  # noqa: F401 (registers the task)
    from longformer_fs.tasks.sentence_prediction import (
        LongformerSentencePredictionConfig,
        LongformerSentencePredictionTask,
    )

    cfg = LongformerSentencePredictionConfig(
        data=str(data), num_classes=2, init_token=0, separator_token=2, shorten_method="truncate",
        max_positions=MAX_POSITIONS, pack=pack, regression_target=False, seed=1,
    )  # fmt: skip
    task = LongformerSentencePredictionTask.setup_task(cfg)
    task.load_dataset("train")
    return task, task.dataset("train")


def test_packed_rows_hold_each_input_once_with_its_label_and_its_first_token(data):
    task, packed = setup(data, pack=True)
    _, fairseqs = setup(data, pack=False)  # fairseq's own items: the oracle
    inputs = sorted((tuple(item["net_input.src_tokens"].tolist()), int(item["target"])) for item in fairseqs)
    batch = packed.collater([packed[i] for i in range(len(packed))])
    tokens, ids = batch["net_input"]["src_tokens"], batch["net_input"]["documents"]
    starts, targets = batch["net_input"]["document_starts"], batch["target"]
    assert len(packed) < len(fairseqs) / 2  # rows hold several inputs
    found = []
    for row in range(len(tokens)):
        for doc in ids[row].unique().tolist():
            if doc != PADDED_DOCUMENT:
                found.append(tuple(tokens[row][ids[row] == doc].tolist()))
    assert batch["nsentences"] == len(found) == len(targets) == len(starts) == len(fairseqs)
    # Each document's start is its <s>, and its target is the label of the input found there.
    flat = tokens.reshape(-1)
    assert flat[starts].eq(task.source_dictionary.bos()).all()
    assert sum(flat.eq(task.source_dictionary.bos()).tolist()) == len(starts)
    assert sorted(zip(found, targets.tolist(), strict=True)) == inputs
    per_row = [len(set(ids[row].tolist()) - {PADDED_DOCUMENT}) for row in range(len(ids))]
    bound = batch["net_input"]["max_documents"]  # the most a row holds, in slots of 8
    assert max(per_row) > 1 and max(per_row) <= bound < max(per_row) + 8 and bound % 8 == 0
    assert batch["ntokens"] == sum(len(t) for t in found)


def test_fairseq_train_classifies_packed_rows_and_each_document_as_alone(data, tmp_path):
    log = fairseq("fairseq-train", data, "--user-dir", USER_DIR, "--task", "longformer_sentence_prediction",
                  "--pack", *CLASSIFY, "--criterion", "sentence_prediction", "--report-acc-and-f1",
                  "--arch", "longformer_roberta_base", *TINY_ROBERTA, "--attention-window", "16",
                  "--global-attention-tokens", "<s>", "--max-global-tokens", "1", "--optimizer", "adam", "--lr", "1e-3",
                  "--batch-size", "4", "--required-batch-size-multiple", "1", "--max-update", "3",
                  "--save-dir", tmp_path / "save", "--no-epoch-checkpoints",
                  *ON_CPU, "--log-format", "json", "--log-interval", "1")  # fmt: skip
    entries = [entry for _, entry in fairseq_json_logs(log, ("train_inner",))]
    assert len(entries) == 3 and all(math.isfinite(float(e["loss"])) for e in entries), log[-2000:]
    # fairseq counts documents, not rows: 4 rows a batch hold more than 4 inputs.
    assert all(float(e["bsz"]) > 4 for e in entries), entries
    valid = [entry for _, entry in fairseq_json_logs(log, ("valid",))]
    assert valid and 0 <= float(valid[-1]["valid_accuracy"]) <= 100

    from longformer_fs.checkpoint import load_model

    model, _ = load_model(tmp_path / "save" / "checkpoint_last.pt", data)
    task, packed = setup(data, pack=True)
    batch = packed.collater([packed[i] for i in range(6)])
    net_input = batch["net_input"]
    with torch.no_grad():
        logits, _ = model(**net_input, classification_head_name="sentence_classification_head")
        tokens, ids = net_input["src_tokens"], net_input["documents"]
        alone = []
        for row in range(len(tokens)):
            for doc in ids[row].unique().tolist():
                if doc != PADDED_DOCUMENT:
                    piece = tokens[row][ids[row] == doc][None]
                    alone.append(model(piece, classification_head_name="sentence_classification_head")[0][0])
        torch.testing.assert_close(logits, torch.stack(alone), atol=1e-4, rtol=1e-4)
        # Without the ids each <s> would see its neighbours: other logits (and more global
        # tokens a row than the bound of one, which holds per document).
        model.encoder.sentence_encoder.max_global = None
        leaky = model(tokens, features_only=True)[0].reshape(-1, model.embed_dim)[net_input["document_starts"]]
        leaky = model.classification_heads["sentence_classification_head"](leaky[:, None])
    assert (logits - leaky).abs().max() > 1e-3
