"""Fine-tuning (paper §6, Table 8) in miniature: classification, TriviaQA-style QA and
WikiHop-style multiple choice, each by real fairseq-train processes on generated data
whose answer lies beyond what a truncated model reads.

A tiny RoBERTa (2 layers, 128 positions) is pretrained briefly by fairseq-train on the
documents' text and converted to a longformer_roberta (2,048 positions, w = 32). The
baselines read the first 128 tokens.

- Classification: 600-token documents whose label is which of two cue words fills 4
  slots after token 300; ``<s>`` is global (the paper's setting). Baseline: fairseq's own
  RoBERTa fine-tuned with ``--shorten-method truncate`` at 128 positions.
- QA: "Which code opens the red gate?" over a 430-token page saying "the red gate opens
  with Zak" at random places, once or twice; the answer is given as an alias ("zak":
  distant supervision, every occurrence is gold). Question tokens are global. Baseline:
  the same model on windows truncated at 128 tokens.
- WikiHop: three candidates, the answer is the one the context mentions; contexts are
  run in 128-token chunks that repeat the question and candidates.
"""

import json
import random

import numpy as np
import pytest
import torch
from helpers import (
    ROOT,
    compose_recipe,
    fairseq,
    finetune_args,
    last_logged,
    ok,
    pretrain_roberta,
    print_results,
)
from helpers import make as make_run

from data_prep.gpt2_bpe import train_bpe

pytestmark = pytest.mark.slow  # six fine-tuning runs

FILL = [a + b + c for a in "bdfg" for b in "aeiou" for c in "lmnr"][:60]
CODES = [f"Z{a}{b}" for a in "aeiou" for b in "kpst"]
COLORS = ["red", "blue", "green", "black"]
SIGNALS = ("zpos", "zneg")
RESULTS = {}  # the miniature Table 8


@pytest.fixture(scope="module", autouse=True)
def print_table8():
    yield
    print_results("\nMiniature Table 8 (valid split):", RESULTS, lambda name, value: f"  {name:<58} {value:6.2f}")


def last_valid(log: str, key: str) -> float:
    return last_logged(log, "valid", key)


def filler(rng, n):
    return [rng.choice(FILL) for _ in range(n)]


# ---------------------------------------------------------------- generated inputs


def classification_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words, label = filler(rng, 600), rng.randrange(2)
        for pos in rng.sample(range(300, 600), 4):
            words[pos] = SIGNALS[label]
        rows.append({"text": " ".join(words), "label": label})
    return rows


def qa_entries(n, seed):
    """TriviaQA-format entries and their pages: the answer's places are uniform over the page."""
    rng = random.Random(seed)
    data, pages = [], {}
    for i in range(n):
        color = rng.choice(COLORS)
        answer = rng.choice(CODES)
        words = filler(rng, 420)
        for _ in range(rng.choice((1, 1, 2))):  # a third of the pages say it twice
            words.insert(rng.randrange(len(words)), f"the {color} gate opens with {answer} .")
        name = f"page{seed}_{i}.txt"
        pages[name] = " ".join(words)
        data.append(
            {
                "QuestionId": f"q{seed}_{i}",
                "Question": f"Which code opens the {color} gate?",
                "Answer": {"Aliases": [answer.lower()], "Value": answer.lower()},
                "EntityPages": [{"Filename": name}],
            }
        )
    return {"Data": data}, pages


def wikihop_entries(n, seed):
    """Three code candidates; the answer is mentioned 3 times in 140 words of supports."""
    rng = random.Random(seed)
    entries = []
    for i in range(n):
        candidates = [c.lower() for c in rng.sample(CODES, 3)]
        answer = rng.choice(candidates)
        words = filler(rng, 140)
        for pos in rng.sample(range(140), 3):
            words[pos] = answer
        supports = [" ".join(words[k : k + 35]) + " ." for k in range(0, 140, 35)]
        query = f"{rng.choice(['located_in', 'member_of'])} {rng.choice(FILL)}"
        entries.append(
            {"id": f"WH{seed}_{i}", "query": query, "answer": answer, "candidates": candidates, "supports": supports}
        )
    return entries


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Generated inputs, the BPE, a pretrained tiny RoBERTa and its conversions."""
    tmp = tmp_path_factory.mktemp("finetune")
    raw = {
        "cls_train": classification_rows(400, 1),
        "cls_valid": classification_rows(100, 2),
        "qa_train": qa_entries(800, 3),
        "qa_valid": qa_entries(60, 4),
        "wh_train": wikihop_entries(100, 5),
        "wh_valid": wikihop_entries(60, 6),
    }
    (tmp / "evidence" / "wikipedia").mkdir(parents=True)
    texts = []
    for name, rows in raw.items():
        if name.startswith("cls"):
            (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            texts += [r["text"] for r in rows]
        elif name.startswith("qa"):
            entries, pages = rows
            (tmp / f"{name}.json").write_text(json.dumps(entries))
            for page, text in pages.items():
                (tmp / "evidence" / "wikipedia" / page).write_text(text)
            texts += list(pages.values()) + [e["Question"] for e in entries["Data"]]
        else:
            (tmp / f"{name}.json").write_text(json.dumps(rows))
            texts += [" ".join([e["query"], *e["candidates"], *e["supports"]]) for e in rows]
    (tmp / "bpe").mkdir()
    train_bpe(texts, tmp / "bpe", 600)
    bpe = ["--encoder-json", tmp / "bpe" / "encoder.json", "--vocab-bpe", tmp / "bpe" / "vocab.bpe"]
    ok("prep", "classification", "--train", tmp / "cls_train.jsonl", "--valid", tmp / "cls_valid.jsonl",
       *bpe, "--dict", tmp / "bpe" / "dict.txt", "--out", tmp / "cls")  # fmt: skip
    # The "released" RoBERTa: a short masked-LM run on the documents' text.
    (tmp / "roberta").mkdir()
    roberta = pretrain_roberta(tmp / "cls" / "input0", tmp / "bpe" / "dict.txt", tmp / "roberta")
    ok("convert-roberta", roberta, "--out", tmp / "converted", "--max-positions", "2048", "--window", "32")
    # WikiHop runs 128-token chunks; its new symbols get embedding rows.
    ok("convert-roberta", roberta, "--out", tmp / "converted_wikihop", "--max-positions", "128", "--window", "32",
       "--add-tokens", "[q],[/q],[ent],[/ent]")  # fmt: skip
    return {"tmp": tmp, "bpe": bpe, "roberta": roberta}


CLASSIFY = ["--task", "sentence_prediction", "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
            "--criterion", "sentence_prediction", "--shorten-method", "truncate", "--report-acc-and-f1",
            "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(work):
    """The module's fine-tuning runs, in this process, longest first: their logs by name.
    Classification, long and truncated at 128; QA on whole pages and on windows cut at
    128; WikiHop in 128-token chunks.

    Each run was shortened while it still learned its task with a margin (2-core CI
    machine, one thread). In batches of 16: classification reaches 100% at 50 updates and
    stays at chance (50%) at 35; QA's F1 is 92 at 40 updates and 100 at 60. In batches of
    8 (used here), both reach 100 at the same 50 and 60 updates, and classification is
    still at chance after 42 (and 33, 25): it runs 65 updates, 1.5 times the longest run
    that fails, and its truncated baseline as many.
    WikiHop (100 examples, batches of 16) ends at a train loss of 0.75 bits after 110
    updates at a peak lr of 4e-3, 1.07 after 90, 1.22 after 80, and 1.30 after 160 updates
    of 8 at 3e-3 (the threshold is 1.28). So a defect that stops the long model learning
    fails here. The truncated baselines train as their long models do. (Documents were
    1,000 and 750 tokens once, and WikiHop 200 examples for 250 updates; then these sizes
    in batches of 16 and WikiHop 160 updates at 3e-3: 92 s for the five runs, now about
    half.)"""
    tmp = work["tmp"]
    for name, max_tokens in (("qa", "2048"), ("qa_short", "128")):
        ok("prep", "qa", "--format", "triviaqa", "--train", tmp / "qa_train.json", "--valid", tmp / "qa_valid.json",
           "--evidence", tmp / "evidence", *work["bpe"], "--dict", tmp / "converted" / "dict.txt",
           "--max-tokens", max_tokens, "--out", tmp / name)  # fmt: skip
    ok("prep", "wikihop", "--train", tmp / "wh_train.json", "--valid", tmp / "wh_valid.json", *work["bpe"],
       "--dict", tmp / "converted_wikihop" / "dict.txt", "--max-tokens", "128", "--out", tmp / "wh")  # fmt: skip
    qa = ["--task", "longformer_qa", "--criterion", "longformer_qa", "--arch", "longformer_roberta",
          "--attention-window", "32", "--finetune-from-model", tmp / "converted" / "model.pt",
          "--max-positions", "2048"]  # fmt: skip
    commands = {
        "qa": finetune_args(tmp / "qa", tmp / "qa_model", *qa, updates=60, batch_size=8),
        "cls_long": finetune_args(tmp / "cls", tmp / "cls_long", *CLASSIFY, "--arch", "longformer_roberta",
                                     "--max-positions", "2048", "--attention-window", "32",
                                     "--global-attention-tokens", "<s>",
                                     "--finetune-from-model", tmp / "converted" / "model.pt", updates=65, batch_size=8),
        "wh": finetune_args(tmp / "wh", tmp / "wh_model", "--task", "longformer_wikihop", "--criterion",
                               "longformer_wikihop", "--arch", "longformer_roberta", "--attention-window", "32",
                               "--max-positions", "128", "--finetune-from-model",
                               tmp / "converted_wikihop" / "model.pt", lr="4e-3", updates=110),
        "qa_short": finetune_args(tmp / "qa_short", tmp / "qa_short_model", *qa, updates=60, batch_size=8),
        "cls_short": finetune_args(tmp / "cls", tmp / "cls_short", *CLASSIFY, "--arch", "roberta",
                                      "--max-positions", "128", "--finetune-from-model",
                                      work["roberta"] / "model.pt", updates=65, batch_size=8),
    }  # fmt: skip
    return {name: fairseq("fairseq-train", *args) for name, args in commands.items()}


# ---------------------------------------------------------------- classification


@pytest.fixture(scope="module")
def classifier(work, runs):
    return work["tmp"] / "cls_long" / "checkpoint_best.pt", runs["cls_long"]


def test_classification_long_documents_beat_truncated_roberta(runs, classifier):
    long_acc = last_valid(classifier[1], "accuracy")
    short_acc = last_valid(runs["cls_short"], "accuracy")
    RESULTS["classification accuracy: Longformer, 600 tokens, <s> global"] = long_acc
    RESULTS["classification accuracy: RoBERTa, truncated at 128"] = short_acc
    RESULTS["classification F1 (fairseq's): Longformer"] = last_valid(classifier[1], "f1")
    assert long_acc >= 90, classifier[1][-2000:]
    assert short_acc <= 70  # the signal is past token 128: about chance


# ---------------------------------------------------------------- QA


@pytest.fixture(scope="module")
def qa(runs):
    return {name: runs[name] for name in ("qa", "qa_short")}


def eval_qa(checkpoint, data, *extra):
    return json.loads(ok("eval-qa", checkpoint, "--data", data, "--json", *extra))


@pytest.fixture(scope="module")
def qa_scored(work, qa):
    """eval-qa of the long QA model on its split, run once for the tests that read it: its
    scores, and the predictions it wrote (``--predictions``), ``{id: answer}``."""
    tmp = work["tmp"]
    scores = eval_qa(tmp / "qa_model" / "checkpoint_best.pt", tmp / "qa", "--predictions", tmp / "predictions.json")
    return scores, json.loads((tmp / "predictions.json").read_text())


def test_qa_long_documents_beat_truncated_windows(work, qa, qa_scored):
    tmp = work["tmp"]
    long, predictions = qa_scored
    short = eval_qa(tmp / "qa_short_model" / "checkpoint_best.pt", tmp / "qa_short")
    RESULTS["QA F1 (per question): Longformer, 430 tokens, question global"] = long["questions"]["f1"]
    RESULTS["QA F1 (per question): same model, windows truncated at 128"] = short["questions"]["f1"]
    assert long["questions"]["count"] == short["questions"]["count"] == 60
    assert long["questions"]["f1"] >= 80, qa["qa"][-2000:]
    assert short["questions"]["f1"] <= long["questions"]["f1"] - 25
    # Answers are cut from the page as written ("Zak"), and scored against the alias ("zak").
    entries, pages = qa_entries(60, 4)
    for entry in entries["Data"]:
        prediction = predictions[f"{entry['QuestionId']}--{entry['EntityPages'][0]['Filename']}"]
        assert prediction in pages[entry["EntityPages"][0]["Filename"]]
    right = [p for p in predictions.values() if p.lower() in {c.lower() for c in CODES}]
    assert right and all(p[0] == "Z" for p in right)


def test_the_int8_file_scores_the_miniature_as_the_model_does(work, qa_scored, tmp_path):
    """export-onnx --quantize int8 of the fine-tuned QA model, scored by eval-qa on the file
    itself (onnxruntime, no PyTorch model): its F1 against the PyTorch model's on the same
    split, and the share of questions answered alike: int8's accuracy cost where we have a
    task (100 against 100 when written). The miniature's answers are one token and do not
    need the question to be global (fed no global tokens, the file answers alike: checked
    by hand), so spans and global patterns are checked against HF in test_export_onnx."""
    tmp = work["tmp"]
    checkpoint = tmp / "qa_model" / "checkpoint_best.pt"
    ok("export-onnx", checkpoint, "--out", tmp_path / "qa8.onnx", "--quantize", "int8")
    model, answers = qa_scored
    int8 = eval_qa(tmp_path / "qa8.onnx", tmp / "qa", "--predictions", tmp_path / "int8.json")
    RESULTS["QA F1 (per question): the same model's int8 ONNX file, eval-qa on it"] = int8["questions"]["f1"]
    answers8 = json.loads((tmp_path / "int8.json").read_text())
    assert answers.keys() == answers8.keys()
    alike = sum(answers[k] == answers8[k] for k in answers) / len(answers)
    assert alike >= 0.9 and int8["questions"]["f1"] >= model["questions"]["f1"] - 5, (alike, int8, model)


def test_the_hub_answers_as_eval_qa_does(work, qa_scored):
    """longformer_fs.from_pretrained on fairseq-train's checkpoint (its dictionary and
    tokenizer found through the data it names): hub.answer(question, page) is eval-qa's
    prediction for every example."""
    from longformer_fs import from_pretrained

    tmp = work["tmp"]
    _, predictions = qa_scored
    hub = from_pretrained(tmp / "qa_model" / "checkpoint_best.pt")
    examples = [json.loads(line) for line in (tmp / "qa" / "valid.examples.jsonl").read_text().splitlines()]
    answers = {e["id"]: hub.answer(e["question"], e["context"]) for e in examples[:20]}
    assert answers == {e["id"]: predictions[e["id"]] for e in examples[:20]}


# ---------------------------------------------------------------- WikiHop


@pytest.fixture(scope="module")
def wikihop(runs):
    return runs["wh"]


def test_wikihop_trains_through_chunks_and_their_average(work, wikihop):
    """The examples are ~190 tokens, run as two 128-token chunks that repeat the question and
    candidates. A 30-update RoBERTa has no features to match a candidate with its mentions
    yet (the task the paper's pretrained model learns), so this checks that the loss, taken
    on candidate logits averaged over chunks, trains: the training set is fitted well
    below chance, which fails when logits are gathered at the wrong tokens (all equal)."""
    stats = json.loads((work["tmp"] / "wh" / "stats.json").read_text())
    assert stats["splits"]["train"]["chunks"] == {"2": 100}
    log = wikihop
    RESULTS["WikiHop train loss, last epoch, bits (chance 1.585)"] = last_logged(log, "train", "loss")
    assert last_logged(log, "train", "loss") <= np.log2(3) - 0.3, log[-2000:]


def test_wikihop_logits_are_the_mean_of_each_chunk_run_alone(work, wikihop):
    """The batched criterion path (chunks of several examples padded together, gathered at
    [ent], averaged by owner) against each chunk run on its own and averaged by hand."""
    from longformer_fs.checkpoint import load_model
    from longformer_fs.tasks.wikihop import CANDIDATE_HEAD, ENTITY, WikihopTask

    tmp = work["tmp"]
    model, task = load_model(tmp / "wh_model" / "checkpoint_best.pt", tmp / "wh")
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    samples = [dataset[i] for i in range(5)]
    with torch.no_grad():
        batched = WikihopTask.model_outputs(model, dataset.collater(samples))
        for row, sample in enumerate(samples):
            per_chunk = []
            for chunk in sample["chunks"]:
                glob = torch.arange(len(chunk)) < sample["prefix_len"]
                features, _ = model(chunk[None], global_attention_mask=glob[None], features_only=True)
                logits = model.token_logits(CANDIDATE_HEAD, features)[0, :, 0].double()
                per_chunk.append(logits[chunk == task.dictionary.index(ENTITY)])
            assert len(per_chunk) == 2
            torch.testing.assert_close(batched[row].double(), torch.stack(per_chunk).mean(0), atol=1e-5, rtol=1e-5)


def test_the_hub_ranks_candidates_as_the_task_scores_them(work, wikihop):
    """hub.rank_candidates(query, candidates, supports), from the raw example, equals the
    task's model_outputs on that example as prep wikihop wrote it."""
    from longformer_fs import from_pretrained
    from longformer_fs.tasks.wikihop import WikihopTask

    tmp = work["tmp"]
    hub = from_pretrained(tmp / "wh_model" / "checkpoint_best.pt")
    hub.task.cfg.data = str(tmp / "wh")
    hub.task.load_dataset("valid")
    dataset = hub.task.dataset("valid")
    for index, entry in enumerate(wikihop_entries(60, 6)[:4]):
        with torch.no_grad():
            logits = WikihopTask.model_outputs(hub.model, dataset.collater([dataset[index]]))[0]
        ranked = hub.rank_candidates(entry["query"], entry["candidates"], entry["supports"])
        torch.testing.assert_close(ranked, torch.log_softmax(logits, dim=-1), atol=1e-5, rtol=1e-5)


def test_or_loss_equals_the_float64_sum_over_occurrences():
    from longformer_fs.modules.task_heads import or_span_loss

    torch.manual_seed(0)
    start, end = torch.randn(3, 12), torch.randn(3, 12)
    allowed = torch.ones(3, 12, dtype=torch.bool)
    allowed[:, :4] = False  # <s> question </s>
    starts = torch.tensor([[5, 9, -1], [6, -1, -1], [-1, -1, -1]])  # the last window holds no answer
    ends = torch.tensor([[6, 10, -1], [8, -1, -1], [-1, -1, -1]])
    loss, answered = or_span_loss(start, end, starts, ends, allowed)
    expected = 0.0
    for row in range(2):
        for logits, gold in ((start, starts), (end, ends)):
            p = torch.softmax(logits[row, 4:].double(), dim=0)
            expected -= torch.log(sum(p[g - 4] for g in gold[row] if g >= 0))
    assert int(answered) == 2
    torch.testing.assert_close(loss.double(), expected, atol=1e-6, rtol=1e-6)


def test_add_tokens_keeps_every_existing_row(work):
    from fairseq import checkpoint_utils

    tmp = work["tmp"]
    before = checkpoint_utils.load_checkpoint_to_cpu(str(work["roberta"] / "model.pt"))["model"]
    after = checkpoint_utils.load_checkpoint_to_cpu(str(tmp / "converted_wikihop" / "model.pt"))["model"]
    key, bias = "encoder.sentence_encoder.embed_tokens.weight", "encoder.lm_head.bias"
    old, new = before[key], after[key]
    lines = (work["roberta"] / "dict.txt").read_text().splitlines()
    first = 4 + len(lines)  # the four specials, then dict.txt; <mask> last
    assert new.shape[0] == old.shape[0] + 4
    assert torch.equal(new[:first], old[:first]) and torch.equal(new[-1], old[-1])  # <mask> keeps its row
    assert new[first:-1].std() > 0 and torch.equal(after[bias][first:-1], torch.zeros(4))
    added = (tmp / "converted_wikihop" / "dict.txt").read_text().splitlines()[len(lines) :]
    assert added == ["[q] 1", "[/q] 1", "[ent] 1", "[/ent] 1"]


def test_wikihop_from_a_checkpoint_without_the_new_tokens_is_a_clear_error(work, wikihop):
    from fairseq import checkpoint_utils

    from longformer_fs.fairseq_format import model_config
    from longformer_fs.tasks.wikihop import WikihopConfig, WikihopTask

    tmp = work["tmp"]
    task = WikihopTask.setup_task(WikihopConfig(data=str(tmp / "wh"), max_positions=512))
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp / "converted" / "model.pt"))
    model = task.build_model(model_config(state))
    with pytest.raises(ValueError, match="--add-tokens"):
        model.load_state_dict(state["model"])


def test_the_batch_global_mask_reaches_every_layer(work, qa):
    """Each attention layer of the QA model, fed a padded batch, returns what the float64
    oracle computes on the same input with the batch's question mask as global tokens."""
    from oracle import oracle_layer

    from longformer_fs.checkpoint import load_model

    tmp = work["tmp"]
    # The 128-token windows keep the float64 oracle (a loop over rows) quick.
    model, task = load_model(tmp / "qa_model" / "checkpoint_best.pt", tmp / "qa_short")
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in (0, 1, 2)])
    tokens, question = batch["net_input"]["src_tokens"], batch["net_input"]["global_attention_mask"]
    tokens[1, -20:], question[1, -20:] = 1, False  # a shorter row: padding on the right
    assert question.any(1).all() and not question.all(1).any()
    seen = []

    def check(module, args, kwargs, output):
        x = kwargs.get("query", args[0] if args else None)
        pad = tokens.eq(1)
        expected = oracle_layer(module.double(), x.double(), pad, question)
        module.float()
        real = ~pad.t()
        torch.testing.assert_close(output[0][real].double(), expected[real], atol=1e-5, rtol=1e-5)
        seen.append(module)

    handles = [
        layer.self_attn.register_forward_hook(check, with_kwargs=True)
        for layer in model.encoder.sentence_encoder.layers
    ]
    with torch.no_grad():
        model(tokens, global_attention_mask=question, features_only=True)
    for handle in handles:
        handle.remove()
    assert len(seen) == 2


# ---------------------------------------------------------------- HF transformers as the oracle


def test_hf_export_of_the_qa_model_gives_our_logits(work, qa):
    """LongformerForQuestionAnswering with the question as its global mask, on padded windows."""
    from transformers import LongformerForQuestionAnswering

    from longformer_fs.checkpoint import load_model
    from longformer_fs.heads import QA_HEAD

    tmp = work["tmp"]
    checkpoint = tmp / "qa_model" / "checkpoint_best.pt"
    report = json.loads(ok("export-hf", checkpoint, "--out", tmp / "hf_qa", "--json"))
    assert report["model_class"] == "LongformerForQuestionAnswering"
    ours, task = load_model(checkpoint, tmp / "qa")
    theirs = LongformerForQuestionAnswering.from_pretrained(tmp / "hf_qa", local_files_only=True).eval()
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(4)])
    tokens, question = batch["net_input"]["src_tokens"], batch["net_input"]["global_attention_mask"]
    with torch.no_grad():
        features, _ = ours(tokens, global_attention_mask=question, features_only=True)
        expected = ours.token_logits(QA_HEAD, features)
        got = theirs(input_ids=tokens, attention_mask=(tokens != 1).long(), global_attention_mask=question.long())
    real = tokens != 1
    torch.testing.assert_close(got.start_logits[real], expected[..., 0][real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.end_logits[real], expected[..., 1][real], atol=1e-5, rtol=1e-5)


def test_hf_export_of_the_classifier_gives_our_logits(work, classifier):
    from transformers import LongformerForSequenceClassification

    from longformer_fs.checkpoint import load_model

    tmp = work["tmp"]
    report = json.loads(ok("export-hf", classifier[0], "--out", tmp / "hf_cls", "--json"))
    assert report["model_class"] == "LongformerForSequenceClassification"
    ours, task = load_model(classifier[0], tmp / "cls")
    theirs = LongformerForSequenceClassification.from_pretrained(tmp / "hf_cls", local_files_only=True).eval()
    task.load_dataset("valid")
    batch = task.dataset("valid").collater([task.dataset("valid")[i] for i in range(3)])
    tokens = batch["net_input"]["src_tokens"]
    with torch.no_grad():
        expected = ours(tokens, features_only=True, classification_head_name="sentence_classification_head")[0]
        got = theirs(input_ids=tokens, attention_mask=(tokens != 1).long(), global_attention_mask=(tokens == 0).long())
    torch.testing.assert_close(got.logits, expected, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- recipes and make targets

# Paper, Table 13 and Appendix B (docs/design.md §8), written out independently of the YAML:
# epochs, warmup (a fraction of the steps, or steps), the dev metric.
PAPER = {
    "imdb": (15, 0.1, "accuracy"),
    "hyperpartisan": (15, 0.1, "f1"),
    "triviaqa": (5, 1000, "loss"),
    "wikihop": (15, 200, "accuracy"),
}
PAPER_TRAIN_ITEMS = {"imdb": 25_000, "hyperpartisan": 528, "triviaqa": 61_888, "wikihop": 43_738}


@pytest.mark.parametrize("name", list(PAPER))
def test_finetune_recipes_hold_the_papers_values(name):
    cfg = compose_recipe(ROOT / "recipes" / "finetune", name, ["task.data=/data"])
    epochs, warmup, metric = PAPER[name]
    steps = epochs * -(-PAPER_TRAIN_ITEMS[name] // 32)
    assert cfg.optimization.lr == [pytest.approx(3e-5)]
    assert cfg.dataset.batch_size * cfg.optimization.update_freq[0] == 32
    assert cfg.optimizer._name == "adam" and tuple(eval(cfg.optimizer.adam_betas)) == (0.9, 0.98)
    assert cfg.lr_scheduler._name == "polynomial_decay" and cfg.lr_scheduler.power == 1.0  # linear decay
    assert cfg.lr_scheduler.end_learning_rate == 0.0
    assert cfg.optimization.max_epoch == epochs
    assert cfg.optimization.max_update == cfg.lr_scheduler.total_num_update == steps
    expected_warmup = round(warmup * steps) if isinstance(warmup, float) else warmup
    assert cfg.lr_scheduler.warmup_updates == expected_warmup
    assert cfg.checkpoint.best_checkpoint_metric == metric
    assert cfg.model._name == "longformer_roberta_base" and cfg.model.max_positions == 4096
    assert cfg.model.attention_window == "256"  # Longformer-base: 512 in all, 256 a side
    assert cfg.common.user_dir.endswith("longformer_fs") and cfg.hydra.job.chdir is False
    if name in ("imdb", "hyperpartisan"):
        assert cfg.task._name == "sentence_prediction" and cfg.model.global_attention_tokens == "<s>"
        assert cfg.task.shorten_method == "truncate" and cfg.criterion.report_acc_and_f1
    else:
        expected = {"triviaqa": "longformer_qa", "wikihop": "longformer_wikihop"}[name]
        assert cfg.task._name == cfg.criterion._name == expected


def make(target, *variables):
    result = make_run(target, *variables)
    return result.returncode, result.stdout + result.stderr


def test_make_finetune_refuses_mismatched_inputs_clearly(work, wikihop):
    tmp = work["tmp"]
    code, log = make("finetune-imdb", f"DATA={tmp / 'cls'}")
    assert code == 2 and "set MODEL=path/model.pt" in log
    code, log = make("finetune-triviaqa", f"MODEL={tmp / 'converted' / 'model.pt'}", f"DATA={tmp / 'cls'}")
    assert code == 2 and "is not a finished `longformer-fs prep qa` directory" in log
    # A WikiHop dataset for a model converted without the four new tokens.
    code, log = make("finetune-wikihop", f"MODEL={tmp / 'converted' / 'model.pt'}", f"DATA={tmp / 'wh'}")
    assert code == 2 and "--add-tokens" in log and "Traceback" not in log


# ---------------------------------------------------------------- the RoBERTa people hold: HF's layout

NETWORK = ("_name", "encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
           "activation_fn", "max_positions", "attention_window", "attention_dilation", "encoder_normalize_before",
           "layernorm_embedding", "no_scale_embedding", "untie_weights_roberta", "pooler_activation_fn")  # fmt: skip


def test_convert_roberta_from_hf_layout_equals_the_fairseq_release(work, tmp_path):
    """The release as the hub serves roberta-base (transformers' RobertaForMaskedLM with
    vocab.json and merges.txt): HF's logits are the release's, and convert-roberta makes
    the same checkpoint from either layout, with tokenizer files that give the same ids."""
    from hf_models import roberta_as_hf

    from longformer_fs.checkpoint import load_model
    from longformer_fs.fairseq_format import config_get, model_config
    from longformer_fs.tokenization import SubwordSpec

    tmp, bpe = work["tmp"], work["tmp"] / "bpe"
    theirs = roberta_as_hf(work["roberta"], bpe, tmp_path / "hf").double()
    release, task = load_model(work["roberta"] / "model.pt", tmp / "cls" / "input0")
    tokens = torch.randint(4, len(task.source_dictionary) - 1, (2, 100), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[1, 70:] = 0, 1
    with torch.no_grad():
        expected = release.double()(tokens)[0]
        got = theirs(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
    # fairseq computes GELU in float32 (fairseq.modules.gelu): agreement to 1e-7, not 1e-15.
    torch.testing.assert_close(got[tokens != 1], expected[tokens != 1], atol=1e-6, rtol=1e-5)

    options = ["--max-positions", "256", "--window", "16"]
    ok("convert-roberta", tmp_path / "hf", "--out", tmp_path / "from_hf", *options)
    ok("convert-roberta", work["roberta"], "--out", tmp_path / "from_fairseq", *options)
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=False) for d in ("from_hf", "from_fairseq"))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]), [
        k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])
    ]
    settings = [{k: config_get(model_config(state), k) for k in NETWORK} for state in (a, b)]
    assert settings[0] == settings[1] and settings[0]["_name"] == "longformer_roberta_base"
    texts = [" ".join(r["text"].split()[:60]) for r in classification_rows(5, 9)] + ["Which code opens the red gate?"]
    hf_files = SubwordSpec.gpt2(*(tmp_path / "from_hf" / f for f in ("encoder.json", "vocab.bpe", "dict.txt")))
    release_files = SubwordSpec.gpt2(bpe / "encoder.json", bpe / "vocab.bpe", tmp_path / "from_fairseq" / "dict.txt")
    for x, y in zip(hf_files.load().encode(texts), release_files.load().encode(texts), strict=True):
        assert x.tolist() == y.tolist()


def test_the_makefile_has_one_target_per_row_of_the_recipes_table():
    """The Makefile reads its finetune-* targets from longformer_fs/recipes.py's table."""
    import subprocess  # make's own database of rules (make -pn)

    from longformer_fs.recipes import FINETUNE_TASKS, finetune_dir

    database = subprocess.run(["make", "-pn", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    line = next(line for line in database.splitlines() if line.startswith("FINETUNE_TASKS :="))
    assert tuple(line.split(":=")[1].split()) == FINETUNE_TASKS
    assert all((finetune_dir() / f"{name}.yaml").is_file() for name in FINETUNE_TASKS)
    assert all(f"finetune-{name}:" in database for name in FINETUNE_TASKS)
