"""HotpotQA (paper §6, Appendix B) in miniature: the joint loss against float64, and the
whole pipeline on generated HotpotQA-format data by real fairseq processes.

Generated questions ask which code opens a coloured gate (or whether it is open); ten
titled paragraphs of two 12-word sentences (~360 tokens), of which the supporting two are
among the last five, past token ~180: one holds the answer ("the red gate opens with Qak
." or "the red gate is shut now ."), the other names the first's title. A tiny RoBERTa (2
layers, 64 wide, a few masked-LM updates) converted to 2,048 positions with w = 32 and
the four new tokens is fine-tuned by fairseq-train (60 updates of 8 questions) on the
whole sequence (question, [p] and [s] global) and, as the baseline, on the same data cut
at 128 tokens, which holds neither supporting paragraph.
"""

import json
import math
import random
import re
import string

import numpy as np
import pytest
import torch
from helpers import ROOT, compose_recipe, fails, fairseq, finetune_args, ok, pretrain_roberta, print_results

from data_prep.gpt2_bpe import train_bpe

WORDS = [a + b + c for a in "kmpt" for b in "aeiou" for c in "dlsx"][:60]
CODES = [f"Q{a}{b}" for a in "aeiou" for b in "kpst"]
COLORS = ["red", "blue", "green", "black"]
RESULTS = {}  # the miniature row of Table 8

TASK = ["--task", "longformer_hotpotqa", "--criterion", "longformer_hotpotqa", "--arch", "longformer_roberta",
        "--attention-window", "32", "--max-positions", "2048"]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def print_row():
    yield
    print_results("\nMiniature HotpotQA (valid split):", RESULTS, lambda name, value: f"  {name:<62} {value:6.2f}")


def sentence(rng, n=12):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + " ."


def hotpot_records(n, seed):
    """HotpotQA-format records (module docstring); a quarter are yes/no questions."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        titles = []
        while len(titles) < 10:
            title = f"{rng.choice(WORDS).title()} {rng.choice(WORDS)}"
            titles += [title] if title not in titles else []
        context = [[title, [sentence(rng) for _ in range(2)]] for title in titles]
        color = rng.choice(COLORS)
        a, b = rng.sample(range(5, 10), 2)
        sa, sb = rng.randrange(2), rng.randrange(2)
        if rng.random() < 0.25:
            state = rng.choice(["open", "shut"])
            context[a][1][sa] = f"the {color} gate is {state} now ."
            question, answer = f"Is the {color} gate open?", "yes" if state == "open" else "no"
        else:
            answer = rng.choice(CODES)
            context[a][1][sa] = f"the {color} gate opens with {answer} ."
            question = f"Which code opens the {color} gate?"
        context[b][1][sb] = f"the {color} gate stands by {titles[a]} ."
        records.append(
            {
                "_id": f"h{seed}_{i}",
                "question": question,
                "answer": answer,
                "type": "bridge",
                "level": "easy",
                "context": context,
                "supporting_facts": [[titles[a], sa], [titles[b], sb]],
            }
        )
    return records


# ---------------------------------------------------------------- the joint loss, float64


class StubModel:
    """Stands for a longformer_roberta: fixed features, and fixed logits per head."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, src_tokens, global_attention_mask=None, features_only=True):
        return torch.zeros(*src_tokens.shape, 4), None

    def token_logits(self, name, features):
        return self.logits[name]


def test_joint_loss_equals_the_float64_sum_of_its_four_terms():
    from longformer_fs.criterions.hotpotqa import HotpotqaCriterion

    torch.manual_seed(0)
    B, T = 3, 10
    span, kind = torch.randn(B, T, 2), torch.randn(B, 3)
    par, sen = torch.randn(B, T, 1), torch.randn(B, T, 1)
    tokens = torch.full((B, T), 5)
    answer = torch.zeros(B, T, dtype=torch.bool)
    answer[:, 4:] = True
    p_mask, s_mask = torch.zeros(B, T, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool)
    p_mask[0, [2, 6]] = p_mask[1, 2] = True  # example 2 lost every marker to truncation
    s_mask[0, [3, 5, 7]] = s_mask[1, [3, 4]] = True
    p_lab, s_lab = torch.zeros(B, T), torch.zeros(B, T)
    p_lab[0, 6] = s_lab[0, 7] = s_lab[1, 4] = p_lab[1, 2] = 1
    starts = torch.tensor([[5, 8], [-1, -1], [6, -1]])  # example 1 is a yes/no question
    ends = torch.tensor([[5, 9], [-1, -1], [7, -1]])
    qtype = torch.tensor([0, 1, 0])
    sample = {
        "net_input": {"src_tokens": tokens, "global_attention_mask": p_mask | s_mask},
        "ntokens": B * T, "starts": starts, "ends": ends, "answer_mask": answer, "qtype": qtype,
        "paragraph_mask": p_mask, "sentence_mask": s_mask, "paragraph_labels": p_lab, "sentence_labels": s_lab,
    }  # fmt: skip
    heads = {"hotpotqa_span": span, "hotpotqa_type": kind, "hotpotqa_paragraph": par, "hotpotqa_sentence": sen}
    weights = (0.5, 2.0, 1.5, 3.0)
    criterion = HotpotqaCriterion(None, *weights)
    loss, size, log = criterion(StubModel(heads), sample)

    def bce(logit, label):
        p = 1 / (1 + math.exp(-logit))
        return -(label * math.log(p) + (1 - label) * math.log(1 - p))

    expected = 0.0
    for b in range(B):
        if (starts[b] >= 0).any():
            for k, gold in ((0, starts[b]), (1, ends[b])):
                logits = span[b, 4:, k].double()
                p = torch.exp(logits) / torch.exp(logits).sum()
                expected -= weights[0] * math.log(sum(float(p[g - 4]) for g in gold if g >= 0))
        z = kind[b].double()
        expected -= weights[1] * float(z[qtype[b]] - torch.log(torch.exp(z).sum()))
        for w, logits, mask, labels in ((weights[2], par, p_mask, p_lab), (weights[3], sen, s_mask, s_lab)):
            where = mask[b].nonzero()[:, 0].tolist()
            if where:
                expected += w * sum(bce(float(logits[b, t, 0]), float(labels[b, t])) for t in where) / len(where)
    assert size == 3 and int(log["type_hits"]) == int((kind.argmax(1) == qtype).sum())
    torch.testing.assert_close(loss.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-5, rtol=1e-6)


def test_evidence_scorer_is_linear_gelu_linear():
    from longformer_fs.modules.task_heads import EvidenceScorer

    scorer = EvidenceScorer(6).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    h = x @ scorer.dense.weight.T + scorer.dense.bias
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    torch.testing.assert_close(scorer(x), h @ scorer.out.weight.T + scorer.out.bias)
    assert scorer(x).shape == (2, 5, 1)


def test_supporting_facts_come_from_the_best_paragraphs():
    from longformer_fs.evaluation.hotpotqa import decide

    example = {"titles": ["A", "B", "C"], "sentence_counts": [2, 1, 3], "context": " x y"}
    span = np.zeros((4, 2))
    paragraphs = np.array([0.5, -3.0, 2.0])
    sentences = np.array([1.0, -1.0, 5.0, -0.5, 0.2, -2.0])  # B's sentence is positive but B ranks last
    got = decide(example, (span, np.array([0.0, 3.0, 1.0]), paragraphs, sentences), np.full((4, 2), -1), 30, 2)
    assert got.answer == "yes" and got.ranked_titles == ["C", "A", "B"]
    assert got.supporting_facts == [["C", 1], ["A", 0]]
    sentences = -np.ones(6)
    sentences[4] = -0.1  # nothing positive: the best sentence of the two best paragraphs
    got = decide(example, (span, np.array([0.0, 1.0, 3.0]), paragraphs, sentences), np.full((4, 2), -1), 30, 2)
    assert got.answer == "no" and got.supporting_facts == [["C", 1]]


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Generated records, the BPE, a briefly pretrained tiny RoBERTa converted with the
    four new tokens, and the data prepared whole (2,048) and cut at 128 tokens."""
    tmp = tmp_path_factory.mktemp("hotpotqa")
    train, valid = hotpot_records(240, 1), hotpot_records(40, 2)
    (tmp / "train.json").write_text(json.dumps(train))
    (tmp / "valid.json").write_text(json.dumps(valid))
    texts = [" ".join([r["question"]] + [t + " " + " ".join(s) for t, s in r["context"]]) for r in train]
    (tmp / "bpe").mkdir()
    train_bpe(texts, tmp / "bpe", 400)
    bpe = ["--encoder-json", tmp / "bpe" / "encoder.json", "--vocab-bpe", tmp / "bpe" / "vocab.bpe"]
    # The "released" RoBERTa: a few masked-LM updates on the paragraphs' text.
    ok("prep", "classification", "--train", _as_jsonl(tmp / "mlm.jsonl", texts), *bpe, "--dict",
       tmp / "bpe" / "dict.txt", "--out", tmp / "mlm")  # fmt: skip
    (tmp / "roberta").mkdir()
    roberta = pretrain_roberta(tmp / "mlm" / "input0", tmp / "bpe" / "dict.txt", tmp / "roberta", updates=10)
    ok("convert-roberta", roberta, "--out", tmp / "converted", "--max-positions", "2048", "--window", "32",
       "--add-tokens", "[q],[/q],[p],[s]")  # fmt: skip
    for name, max_tokens in (("data", "2048"), ("data_short", "128")):
        ok("prep", "hotpotqa", "--train", tmp / "train.json", "--valid", tmp / "valid.json", *bpe,
           "--dict", tmp / "converted" / "dict.txt", "--max-tokens", max_tokens, "--out", tmp / name)  # fmt: skip
    return {"tmp": tmp, "bpe": bpe, "model": tmp / "converted" / "model.pt", "valid": valid}


def _as_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t, "label": 0}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def trained(work):
    tmp = work["tmp"]
    names = ("data", "data_short")
    runs = [finetune_args(tmp / name, tmp / f"{name}_model", *TASK, "--finetune-from-model", work["model"],
                                 lr="2e-3", updates=60, batch_size=8) for name in names]  # fmt: skip
    return {name: fairseq("fairseq-train", *args) for name, args in zip(names, runs, strict=True)}


def eval_hotpotqa(checkpoint, data, *extra):
    return json.loads(ok("eval-hotpotqa", checkpoint, "--data", data, "--json", "--device", "cpu", *extra))


def test_prep_counts_the_cut_sequences(work):
    long = json.loads((work["tmp"] / "data" / "stats.json").read_text())["splits"]["valid"]
    short = json.loads((work["tmp"] / "data_short" / "stats.json").read_text())["splits"]["valid"]
    assert long["truncated"] == 0 and 300 < long["mean_tokens"] < 450
    assert short["truncated"] == 40 and short["longest"] == 128
    spans = sum(r["answer"] not in ("yes", "no") for r in work["valid"])
    assert short["answer_lost_to_truncation"] == spans and long["span_without_match"] == 0


def test_long_inputs_beat_truncated_ones(work, trained):
    """The miniature row: the whole ~360-token question against the same model cut at 128."""
    tmp = work["tmp"]
    long = eval_hotpotqa(tmp / "data_model" / "checkpoint_best.pt", tmp / "data", "--predictions", tmp / "pred.json")
    short = eval_hotpotqa(tmp / "data_short_model" / "checkpoint_best.pt", tmp / "data_short")
    for name, scores in (("Longformer, ~360 tokens, question/[p]/[s] global", long), ("cut at 128", short)):
        for metric in ("f1", "sp_f1", "joint_f1"):
            RESULTS[f"{metric:<8} {name}"] = scores[metric]
    assert long["count"] == short["count"] == 40
    # 60 updates of a 2-layer model: the answer is mostly learnt, the evidence partly; the
    # cut model sees neither (its yes/no guesses may share a word with nothing: F1 about 0).
    assert long["f1"] >= 55, trained["data"][-3000:]
    assert long["f1"] >= short["f1"] + 35 and long["sp_f1"] >= short["sp_f1"] + 25
    assert long["joint_f1"] >= short["joint_f1"] + 20
    # The prediction file has HotpotQA's format; span answers are cut from the text as written.
    predictions = json.loads((tmp / "pred.json").read_text())
    assert set(predictions) == {"answer", "sp"} and len(predictions["answer"]) == 40
    gold = {r["_id"]: r for r in work["valid"]}
    right = [k for k, a in predictions["answer"].items() if a == gold[k]["answer"] and a not in ("yes", "no")]
    assert right and all(predictions["answer"][k][0] == "Q" for k in right)
    titles = {k: {t for t, _ in gold[k]["context"]} for k in gold}
    assert all(title in titles[k] and isinstance(i, int) for k, sp in predictions["sp"].items() for title, i in sp)


def test_eval_prints_the_three_scores_and_refuses_other_data(work, trained):
    tmp = work["tmp"]
    out = ok("eval-hotpotqa", tmp / "data_model" / "checkpoint_best.pt", "--data", tmp / "data", "--device", "cpu")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["answer", "supporting", "joint"]
    err = fails("eval-hotpotqa", tmp / "data_model" / "checkpoint_best.pt", "--data", tmp / "bpe")
    assert "prep hotpotqa" in err
    err = fails("export-hf", tmp / "data_model" / "checkpoint_best.pt", "--out", tmp / "hf")
    assert "HotpotQA's heads" in err and "no such head" in err and not (tmp / "hf").exists()


def test_the_hub_answers_the_gold_files_questions_as_eval_hotpotqa_scores_them(work, trained):
    """The hub's predictions on the prepared split are the official script's input, a
    prediction for every question of the gold file; their exact matches against the gold
    answers and supporting facts, counted here, are the EM eval-hotpotqa reports."""
    from longformer_fs import from_pretrained
    from longformer_fs.evaluation.hotpotqa import prediction_file

    tmp = work["tmp"]
    checkpoint = tmp / "data_model" / "checkpoint_best.pt"
    predicted = prediction_file(from_pretrained(checkpoint).predict_prepared(tmp / "data"))
    gold = {r["_id"]: r for r in work["valid"]}
    assert set(predicted["answer"]) == set(predicted["sp"]) == set(gold)
    answers = sum(normalized(predicted["answer"][k]) == normalized(gold[k]["answer"]) for k in gold)
    facts = sum({tuple(f) for f in predicted["sp"][k]} == {tuple(f) for f in gold[k]["supporting_facts"]} for k in gold)
    printed = ok("eval-hotpotqa", checkpoint, "--data", tmp / "data", "--device", "cpu")
    em = {line.split()[0]: float(re.search(r"EM\s+([\d.]+)", line)[1]) for line in printed.splitlines()[1:]}
    assert em["answer"] == pytest.approx(100 * answers / len(gold), abs=0.01) and answers > 0
    assert em["supporting"] == pytest.approx(100 * facts / len(gold), abs=0.01)


def normalized(answer: str) -> str:
    """HotpotQA's official normalisation: lower case, no punctuation, no articles, one space."""
    text = "".join(ch for ch in answer.lower() if ch not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


# ---------------------------------------------------------------- recipes and make targets

PAPER_TRAIN_QUESTIONS = 90_447  # HotpotQA's train split


@pytest.mark.parametrize("name", ["hotpotqa", "hotpotqa_evidence", "hotpotqa_answer"])
def test_recipes_hold_the_papers_values(name):
    """Appendix B, written out here: Adam (0.9, 0.98), LR 3e-5, batch 32, 6 epochs, 1,000
    warmup steps then linear decay, 4,096 positions, w = 256, fp16."""
    cfg = compose_recipe(ROOT / "recipes" / "finetune", name, ["task.data=/data"])
    steps = 6 * -(-PAPER_TRAIN_QUESTIONS // 32)
    assert cfg.optimization.lr == [pytest.approx(3e-5)] and cfg.optimization.max_epoch == 6
    assert cfg.dataset.batch_size * cfg.optimization.update_freq[0] == 32
    assert cfg.optimizer._name == "adam" and tuple(eval(cfg.optimizer.adam_betas)) == (0.9, 0.98)
    assert cfg.lr_scheduler._name == "polynomial_decay" and cfg.lr_scheduler.power == 1.0
    assert cfg.lr_scheduler.end_learning_rate == 0.0 and cfg.lr_scheduler.warmup_updates == 1000
    assert cfg.optimization.max_update == cfg.lr_scheduler.total_num_update == steps
    assert cfg.model._name == "longformer_roberta_base" and cfg.model.max_positions == cfg.task.max_positions == 4096
    assert cfg.model.attention_window == "256" and cfg.common.fp16
    assert cfg.task._name == cfg.criterion._name == "longformer_hotpotqa"
    assert cfg.common.user_dir.endswith("longformer_fs") and cfg.hydra.job.chdir is False
    weights = [cfg.criterion[f"{t}_weight"] for t in ("span", "type", "paragraph", "sentence")]
    assert weights == ([0, 0, 1, 1] if name == "hotpotqa_evidence" else [1, 1, 1, 1])
