"""docs/finetune.md's journeys from fairseq's RoBERTa release, each from its dataset as
released to its task's metric: classification (IMDB's folders, Hyperpartisan's JSONL over
five seeds, out to HF), WikiHop, HotpotQA (and its two-stage variant), coreference. The
recipes run on this CPU with two updates each (``HYDRA_ARGS``); the TriviaQA journey,
the README's, runs unshrunk (test_journey_triviaqa.py)."""

import json
import re

import numpy as np
import pytest
import torch
from helpers import assert_refused_in_one_line
from journey import Journey, Workspace
from releases import write_aclimdb, write_byarticle, write_conll_release, write_hotpotqa_release, write_wikihop_release

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

TWO_UPDATES = 'HYDRA_ARGS="optimization.max_update=2 dataset.num_workers=0"'


def workspace_with_roberta(tmp_path, roberta_base, gpt2) -> Workspace:
    workspace = Workspace(tmp_path / "checkout")
    (workspace.root / "roberta.base").symlink_to(roberta_base)
    (workspace.root / "gpt2").symlink_to(gpt2)
    return workspace


def step_log(logs: dict, prefix: str) -> str:
    return next(log for step, log in logs.items() if step.startswith(prefix))


def trained_in_float32(log: str, recipe: str) -> bool:
    """The recipe's one-line notice that without CUDA it trains in float32."""
    return f"recipe {recipe} trains in float32 (common.fp16=false)" in log


def test_classification_imdb_and_hyperpartisan_over_seeds(roberta_base, gpt2, tmp_path):
    """The classification journey; Hyperpartisan over seeds with the page's own SEEDS set to
    2 (the page runs 5): two runs already show one run per seed, with that seed, and the
    mean and spread over them (a make target that ran one seed, or reported one run's F1 as
    the mean, fails on 2 as on 5)."""
    from transformers import LongformerForSequenceClassification

    workspace = workspace_with_roberta(tmp_path, roberta_base, gpt2)
    write_aclimdb(workspace.path("aclImdb"))
    write_byarticle(workspace.path("byarticle.jsonl"), [False, True, False, True, False])
    # Two seeds of the page's five: what the mean and spread over seeds need (SEEDS, which the page shows).
    logs = Journey("classification", {"make finetune-": TWO_UPDATES, "make finetune-hyperpartisan": "SEEDS=2"}).run(
        workspace
    )
    imdb = json.loads(workspace.path("data-bin/imdb/stats.json").read_text())
    assert imdb["splits"]["train"]["documents"] == 5  # unsup/ is not a label
    report = step_log(logs, "make finetune-hyperpartisan")
    assert report.count("recipe hyperpartisan trains in float32 (common.fp16=false)") == 2
    # 3 training articles, batch 32, 15 epochs: 15 updates, 10% warmup (before HYDRA_ARGS' 2).
    assert "lr_scheduler.total_num_update=15 lr_scheduler.warmup_updates=2" in report
    runs = workspace.path("checkpoints/finetune/hyperpartisan")
    states = [torch.load(runs / f"seed{s}" / "checkpoint_best.pt", weights_only=False) for s in range(1, 3)]
    assert [s["cfg"]["common"]["seed"] for s in states] == [1, 2] and not (runs / "seed3").exists()
    head = "classification_heads.sentence_classification_head.out_proj.weight"
    assert not torch.equal(states[0]["model"][head], states[1]["model"][head])
    best = [s["extra_state"]["best"] for s in states]
    summary = f"f1 over 2 seeds: mean {np.mean(best):.2f}, std {np.std(best, ddof=1):.2f}"
    assert summary in report.splitlines(), report[-2000:]
    model = LongformerForSequenceClassification.from_pretrained(workspace.path("hf_hyperpartisan"))
    assert model.config.num_labels == 2


def test_wikihop(roberta_base, gpt2, tmp_path):
    workspace = workspace_with_roberta(tmp_path, roberta_base, gpt2)
    write_wikihop_release(workspace.root)
    logs = Journey("wikihop", {"make finetune-": TWO_UPDATES}).run(workspace)
    make = step_log(logs, "make finetune-wikihop")
    assert trained_in_float32(make, "wikihop") and re.search(r"best accuracy [\d.]+", make)


def test_hotpotqa_and_its_two_stages(roberta_base, gpt2, tmp_path):
    workspace = workspace_with_roberta(tmp_path, roberta_base, gpt2)
    write_hotpotqa_release(workspace.root)
    logs = Journey("hotpotqa", {"make finetune-": TWO_UPDATES}).run(workspace)
    assert trained_in_float32(step_log(logs, "make finetune-hotpotqa MODEL"), "hotpotqa")
    runs = workspace.path("checkpoints/finetune")
    state = torch.load(runs / "hotpotqa" / "checkpoint_best.pt", weights_only=False)
    assert {k.split(".")[1] for k in state["model"] if k.startswith("token_heads.")} == {
        "hotpotqa_span", "hotpotqa_type", "hotpotqa_paragraph", "hotpotqa_sentence"
    }  # fmt: skip
    test = json.loads(workspace.path("test_pred.json").read_text())
    assert set(test) == {"answer", "sp"} and len(test["answer"]) == 2  # the test file's two questions

    # Two stages: the scorers alone, their two best paragraphs a question, answers from those.
    two_stage = step_log(logs, "make finetune-hotpotqa-two-stage")
    stage1 = torch.load(runs / "hotpotqa_evidence" / "checkpoint_best.pt", weights_only=False)
    assert stage1["cfg"]["criterion"]["span_weight"] == stage1["cfg"]["criterion"]["type_weight"] == 0
    evidence = json.loads((runs / "hotpotqa_evidence" / "valid.evidence.json").read_text())
    assert evidence and all(len(titles) == 2 for titles in evidence.values())
    for line in (runs / "hotpotqa_answer" / "data" / "valid.examples.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert sorted(row["titles"]) == sorted(evidence[row["_id"]])
    assert trained_in_float32(two_stage, "hotpotqa_evidence") and trained_in_float32(two_stage, "hotpotqa_answer")
    stage2 = two_stage[two_stage.index(">> stage 2") :]
    assert re.search(r"^ +joint +EM", stage2, re.M), stage2[-2000:]  # eval-hotpotqa of stage 2
    assert_refused_in_one_line(
        workspace.root, ["eval-hotpotqa", "{checkpoint}", "--data", "data-bin/hotpotqa"], tmp_path / "bad",
        workspace.path("checkpoints/finetune/hotpotqa/checkpoint_best.pt"),
    )  # fmt: skip


def test_coreference(roberta_base, gpt2, tmp_path):
    workspace = workspace_with_roberta(tmp_path, roberta_base, gpt2)
    write_conll_release(workspace.root)
    logs = Journey("coref", {"make finetune-": TWO_UPDATES}).run(workspace)
    make = step_log(logs, "make finetune-coref")
    assert trained_in_float32(make, "coref")
    # Two English training documents, one an update (Joshi et al.), 20 epochs, 10% warmup.
    assert "optimization.update_freq=[1] optimization.max_update=40 lr_scheduler.total_num_update=40" in make
    assert "lr_scheduler.warmup_updates=4" in make
    for name in ("MUC", "B3", "CEAF-phi4"):
        assert re.search(rf"^valid {name} +P +[\d.]+ +R +[\d.]+ +F1 +[\d.]+$", make, re.M), make[-2000:]
    assert re.search(r"^valid CoNLL F1 [\d.]+ over 1 documents$", make, re.M)
    clusters = [json.loads(line) for line in workspace.path("clusters.jsonl").read_text().splitlines()]
    assert [c["id"] for c in clusters] == ["nw/wsj/00/wsj_0002"]
    assert_refused_in_one_line(
        workspace.root, ["eval-coref", "{checkpoint}", "--data", "data-bin/coref"], tmp_path / "bad",
        workspace.path("checkpoints/finetune/coref/checkpoint_best.pt"),
    )  # fmt: skip
