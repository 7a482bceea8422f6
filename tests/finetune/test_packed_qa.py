"""``longformer_qa --pack`` (issue #75): whole QA windows packed first-fit into rows, each with
its question as its own global tokens and its own softmax over its document tokens; trained by
fairseq-train. The oracles are the unpacked windows ``prep qa`` wrote and the model run on each
window alone."""

import json
import math
import random

import pytest
import torch
from conftest import bpe_args
from helpers import ON_CPU, TINY_ROBERTA, USER_DIR, fairseq, fairseq_json_logs, ok

from longformer_fs.modules.task_heads import or_span_loss
from longformer_fs.tasks.packed_documents import PADDED_DOCUMENT
from longformer_fs.tasks.token_head_task import global_slots

MAX_POSITIONS = 256
WORDS = "the gate of this old town was built of stone and wood by the river near a hill".split()
CODES = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango"]


@pytest.fixture(scope="module")
def data(gpt2, tmp_path_factory):
    """``prep qa`` of SQuAD-style paragraphs of long-tailed lengths, each answering which code
    opens its gate (some paragraphs say it twice: two gold spans)."""
    root = tmp_path_factory.mktemp("packed_qa")
    rng = random.Random(0)
    for split, count in (("train", 40), ("valid", 12)):
        paragraphs = []
        for i in range(count):
            code = rng.choice(CODES)
            words = [rng.choice(WORDS) for _ in range(min(int(rng.lognormvariate(3.2, 0.7)) + 4, 150))]
            for _ in range(rng.choice((1, 2))):
                words.insert(rng.randrange(len(words) + 1), f"the gate opens with {code} .")
            context = " ".join(words)
            start = context.index(code)
            qas = [{"id": f"{split}{i}", "question": "Which code opens the gate?",
                    "answers": [{"text": code, "answer_start": start}]}]  # fmt: skip
            paragraphs.append({"context": context, "qas": qas})
        (root / f"{split}.json").write_text(json.dumps({"data": [{"title": split, "paragraphs": paragraphs}]}))
    ok("prep", "qa", "--format", "squad", "--train", root / "train.json", "--valid", root / "valid.json",
       *bpe_args(gpt2), "--max-tokens", str(MAX_POSITIONS), "--out", root / "data")  # fmt: skip
    return root / "data"


def setup(data, pack: bool):
    import longformer_fs.tasks  # noqa: F401 (registers the task)
    from longformer_fs.tasks.qa import QaConfig, QaTask

    task = QaTask.setup_task(QaConfig(data=str(data), max_positions=MAX_POSITIONS, pack=pack))
    task.load_dataset("train")
    return task, task.dataset("train")


def windows_of(batch):
    """Each packed window of a batch, in row order: (tokens, question mask, gold starts and ends in
    the window's own positions)."""
    tokens, ids = batch["net_input"]["src_tokens"], batch["net_input"]["documents"]
    slots, found = batch["net_input"]["max_documents"], []
    for row in range(len(tokens)):
        for doc in ids[row].unique().tolist():
            if doc == PADDED_DOCUMENT:
                continue
            where = (ids[row] == doc).nonzero()[:, 0]
            offset, gold = int(where[0]), row * slots + doc
            starts, ends = batch["starts"][gold], batch["ends"][gold]
            asks = batch["net_input"]["global_attention_mask"][row][where]
            found.append((tokens[row][where].tolist(), asks.tolist(), sorted((starts[starts >= 0] - offset).tolist()),
                          sorted((ends[ends >= 0] - offset).tolist())))  # fmt: skip
    return found


def test_packed_rows_hold_each_window_once_with_its_question_and_gold_spans(data):
    _, packed = setup(data, pack=True)
    _, windows = setup(data, pack=False)  # prep qa's windows, as the unpacked task reads them: the oracle
    expected = []
    for i in range(len(windows)):
        one = windows.collater([windows[i]])
        starts, ends = one["starts"][0], one["ends"][0]
        expected.append((one["net_input"]["src_tokens"][0].tolist(),
                         one["net_input"]["global_attention_mask"][0].tolist(),
                         sorted(starts[starts >= 0].tolist()), sorted(ends[ends >= 0].tolist())))  # fmt: skip
    batch = packed.collater([packed[i] for i in range(len(packed))])
    found = windows_of(batch)
    assert len(packed) < len(windows) / 2  # rows hold several windows
    assert sorted(found) == sorted(expected)
    assert batch["nsentences"] == len(windows)
    # A window slot a row lacks has no gold position.
    slots = batch["net_input"]["max_documents"]
    used = {row * slots + doc for row, ids in enumerate(batch["net_input"]["documents"]) for doc in ids.tolist()}
    empty = [slot for slot in range(len(batch["starts"])) if slot not in used]
    assert empty and (batch["starts"][empty] < 0).all()


def test_fairseq_train_packs_windows_and_scores_each_as_alone(data, tmp_path):
    log = fairseq("fairseq-train", data, "--user-dir", USER_DIR, "--task", "longformer_qa", "--pack",
                  "--max-positions", str(MAX_POSITIONS), "--criterion", "longformer_qa",
                  "--arch", "longformer_roberta_base", *TINY_ROBERTA, "--attention-window", "16",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "2", "--required-batch-size-multiple", "1",
                  "--max-update", "3", "--save-dir", tmp_path / "save", "--no-epoch-checkpoints",
                  *ON_CPU, "--log-format", "json", "--log-interval", "1")  # fmt: skip
    entries = [entry for _, entry in fairseq_json_logs(log, ("train_inner",))]
    assert len(entries) == 3 and all(math.isfinite(float(e["loss"])) for e in entries), log[-2000:]
    assert all(float(e["bsz"]) > 2 for e in entries), entries  # windows, not rows
    assert [entry for _, entry in fairseq_json_logs(log, ("valid",))]

    from longformer_fs.checkpoint import load_model
    from longformer_fs.criterions.qa import QaCriterion

    model, eval_task = load_model(tmp_path / "save" / "checkpoint_last.pt", data)
    eval_task.load_dataset("train")
    assert not hasattr(eval_task.dataset("train"), "packed")  # evaluation reads windows one by one
    task, packed = setup(data, pack=True)
    batch = packed.collater([packed[i] for i in range(3)])
    criterion = QaCriterion(task)
    with torch.no_grad():
        loss, answered, logged = criterion(model, batch)
        packed_logits = task.model_outputs(model, batch)
        # Each window alone: its logits, and the OR loss over its own document tokens (the oracle
        # is or_span_loss on one unpacked window).
        ids = batch["net_input"]["documents"]
        total, count = 0.0, 0
        for (window, asks, starts, ends), (row, doc) in zip(
            windows_of(batch),
            [(r, d) for r in range(len(ids)) for d in ids[r].unique().tolist() if d != PADDED_DOCUMENT],
            strict=True,
        ):
            where = ids[row] == doc
            asks = torch.tensor([asks])
            alone = {"net_input": {"src_tokens": torch.tensor([window]), "global_attention_mask": asks,
                                   "max_global_tokens": global_slots(asks)}}  # fmt: skip
            logits = task.model_outputs(model, alone)[0]
            torch.testing.assert_close(packed_logits[row][where], logits, atol=1e-4, rtol=1e-4)
            allowed = batch["document_mask"][row][where][None]
            gold = [torch.tensor([g or [-1]]) for g in (starts, ends)]
            one, has = or_span_loss(logits[None, :, 0], logits[None, :, 1], *gold, allowed)
            total, count = total + float(one), count + int(has)
        # Without the ids each question would be global to its neighbours too: other logits.
        leaky = {"net_input": {k: v for k, v in batch["net_input"].items() if k not in ("documents", "max_documents")}}
        assert (task.model_outputs(model, leaky) - packed_logits).abs().max() > 1e-3
    assert int(answered) == count > 0
    assert float(loss) == pytest.approx(total, rel=1e-4)
    assert logged["nsentences"] == len(windows_of(batch))
