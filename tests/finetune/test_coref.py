"""Coreference (paper §6, OntoNotes) in miniature: the coarse-to-fine span model against
float64 oracles, and ``prep coref`` -> fairseq-train / fairseq-hydra-train / make ->
``eval-coref`` on generated documents whose pronouns need context a truncated model
does not see.

Miniature task. Each document (520 one-token words) names two entities, each right after
a run of 30 words of its colour ("red red ... red zorb", "blue ... blue blick"), in its
first 92 words. At every 126th word (the first token of a 128-position segment: ``<s>``,
126 tokens, ``</s>``) stands a pronoun ``it``, right after a run of 30 words of the
colour of the entity it refers to; so each pronoun is more than 30 tokens from the
entity's name and 126 from the previous pronoun. The Longformer model (2,048 positions,
w = 32) reads the document as one segment and sees the run before each pronoun; the same
model reading 128-token segments (RoBERTa's setting: segments concatenated, features that
cannot cross them) sees each ``it`` at the start of a segment, the run in the previous
one, and cannot tell the entities apart. The tiny RoBERTa is pretrained for 250
masked-LM updates first: with 10, context moves a token's features by 0.3% and neither
model learns to use it (both score about 65, linking each pronoun to a nearby mention).
With 250, the long model still fails the test's bar of 80 after 88 fine-tuning updates
(70: 76.9, 80: 69.1, 88: 78.2) and passes after 95 (95.0 against the segmented model's
65.0, the nearby-mention heuristic), so the test runs 142, 1.5 times the longest run that
may fail: 100 against 63.8 (105: 94.0; 120: 95.8; with 500 pretraining updates, 98.3
against 0); the test asks for 80 and a margin of 25.
"""

import json
import os
import random

import numpy as np
import pytest
import torch
from helpers import ROOT, fails, fairseq, finetune_args, ok, pretrain_roberta, print_results

from data_prep.gpt2_bpe import train_bpe
from longformer_fs.modules.coref import (
    CorefHead,
    antecedent_loss,
    candidate_spans,
    document_features,
    gold_clusters_of,
    predict_clusters,
    prune_spans,
)

pytestmark = pytest.mark.slow  # two coreference fine-tuning runs

FILL = [a + b + c for a in "bdfg" for b in "aeiou" for c in "lmnr"][:40]
NAMES = ["zorb", "blick", "tarn", "quell", "mox", "vend"]
COLORS = ["red", "blue", "green", "gold"]
WORDS, SEGMENT = 520, 126  # words per document; tokens per 128-position segment
NAME_AT = (31, 91)  # where the two entities are named
CUES = 30  # the run of colour words just before each mention
RESULTS = {}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread for this module's runs (fairseq-train, make and the evaluations
    in this process). The span model's many small ops lose more to thread synchronisation
    than they gain: the miniature's setup took 88 s with one thread and 166 s with two on
    the 2-core CI machine (the larger fine-tuning runs elsewhere gain from two threads)."""
    saved_env, saved_threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved_threads)
    if saved_env is None:
        del os.environ["OMP_NUM_THREADS"]
    else:
        os.environ["OMP_NUM_THREADS"] = saved_env


@pytest.fixture(scope="module", autouse=True)
def print_table():
    yield
    print_results("\nMiniature coreference (valid, CoNLL F1):", RESULTS, lambda n, v: f"  {n:<58} {v:6.2f}")


# ---------------------------------------------------------------- the span model against oracles


def small_head(**kwargs):
    torch.manual_seed(0)
    sizes = {"max_span_width": 3, "feature_size": 4, "ffnn_size": 16, "dropout": 0.0}
    sizes.update(top_span_ratio=0.5, max_top_antecedents=3, non_crossing=False)
    sizes.update(kwargs)
    return CorefHead(8, **sizes).double()


def oracle_span(head, x, s, e):
    """g of span (s, e) by its definition, one span at a time (float64)."""
    logits = head.head_logit(x[s : e + 1])[:, 0]
    weights = torch.softmax(logits, 0)
    attended = (weights[:, None] * x[s : e + 1]).sum(0)
    return torch.cat([x[s], x[e], attended, head.width.weight[e - s]])


def test_candidates_are_all_spans_within_a_sentence_up_to_the_width():
    sentence = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    starts, ends, valid = candidate_spans(sentence, 3)
    got = {(s, e) for s, e, v in zip(starts.tolist(), ends.tolist(), valid.tolist(), strict=True) if v}
    brute = {(s, e) for s in range(9) for e in range(s, min(s + 3, 9)) if sentence[s] == sentence[e]}
    assert got == brute


def test_span_embeddings_and_pruning_match_brute_force():
    head = small_head()
    x = torch.randn(9, 8, dtype=torch.float64)
    starts, ends, valid = candidate_spans(torch.zeros(9, dtype=torch.long), 3)
    spans = head.span_embeddings(x)
    for i in torch.nonzero(valid)[:, 0].tolist():
        torch.testing.assert_close(spans[i], oracle_span(head, x, starts[i].item(), ends[i].item()))
    scores = torch.randn(len(starts), dtype=torch.float64).masked_fill(~valid, float("-inf"))
    candidates = [(scores[i].item(), starts[i].item(), ends[i].item(), i) for i in range(len(starts)) if valid[i]]
    ranked = sorted(candidates, reverse=True)
    for k in (1, 5, 9):
        top = prune_spans(scores, starts, ends, k, non_crossing=False)
        assert sorted(top.tolist()) == sorted(c[3] for c in ranked[:k])
        assert [(starts[i].item(), ends[i].item()) for i in top] == sorted((c[1], c[2]) for c in ranked[:k])
        # Non-crossing: greedy down the ranking, skipping any span that crosses a kept one.
        kept = []
        for _, s, e, i in ranked:
            if len(kept) < k and not any(s < s2 <= e < e2 or s2 < s <= e2 < e for s2, e2, _ in kept):
                kept.append((s, e, i))
        top = prune_spans(scores, starts, ends, k, non_crossing=True)
        assert sorted(top.tolist()) == sorted(i for _, _, i in kept)


def test_marginal_log_likelihood_equals_a_float64_oracle():
    head = small_head(max_top_antecedents=10)
    T = 10
    x = torch.randn(T, 8, dtype=torch.float64)
    sentence, segment = torch.tensor([0] * 5 + [1] * 5), torch.tensor([0] * 6 + [1] * 4)
    speaker = torch.tensor([0, 0, 0, 1, 1, 1, 0, 0, 1, 1])
    out = head(x, sentence, segment, speaker)
    kept = list(zip(out.top_starts.tolist(), out.top_ends.tolist(), strict=True))
    # Gold: kept spans 0, 2, 4 in one cluster, 3 in another with a span pruning dropped.
    dropped = next((s, e) for s in range(T) for e in range(s, s + 3) if (s, e) not in kept)
    gold = {kept[0]: 1, kept[2]: 1, kept[4]: 1, kept[3]: 2, dropped: 2}
    gs, ge, gc = (torch.tensor(v) for v in zip(*[(s, e, c) for (s, e), c in gold.items()], strict=True))
    cluster = gold_clusters_of(out.top_starts, out.top_ends, gs, ge, gc)
    loss = antecedent_loss(out, cluster)
    # The oracle: every pair scored from the definitions, all earlier kept spans as
    # antecedents (K >= k), the loss summed by hand.
    spans = [(s, e) for s, e in zip(out.top_starts.tolist(), out.top_ends.tolist(), strict=True)]
    assert spans == sorted(spans) and len(spans) == 5
    g = [oracle_span(head, x, s, e) for s, e in spans]
    s_m = [head.mention(gi[None])[0, 0] for gi in g]
    total = 0.0
    for i, (si, ei) in enumerate(spans):
        scores, golds = [torch.tensor(0.0, dtype=torch.float64)], []
        for j in range(i):
            sj = spans[j][0]
            bucket = min(i - j, 4) if i - j <= 4 else min(int(np.floor(np.log2(i - j))) + 3, 9)
            phi = torch.cat([head.distance.weight[bucket], head.segment_distance.weight[segment[si] - segment[sj]],
                             head.same_speaker.weight[int(speaker[si] == speaker[sj])]])  # fmt: skip
            coarse = s_m[i] + s_m[j] + head.coarse(g[i]) @ g[j]
            fine = head.fine(torch.cat([g[i], g[j], g[i] * g[j], phi]))[0]
            scores.append(coarse + fine)
            if gold.get((si, ei)) and gold.get((si, ei)) == gold.get(spans[j]):
                golds.append(len(scores) - 1)
        golds = golds or [0]
        scores = torch.stack(scores)
        total += (torch.logsumexp(scores, 0) - torch.logsumexp(scores[golds], 0)).item()
    assert loss.dtype == torch.float32  # computed in float32 (as in fp16 training) ...
    assert abs(loss.item() - total) < 1e-4 * max(1.0, abs(total))  # ... and equal to the oracle


def test_predicted_clusters_chain_the_best_antecedents():
    head = small_head(max_top_antecedents=10)
    out = head(torch.randn(6, 8, dtype=torch.float64), torch.zeros(6, dtype=torch.long),
               torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long))  # fmt: skip
    k = out.scores.shape[0]
    scores = torch.full_like(out.scores, -5.0)
    scores[:, 0] = 0
    spans = list(zip(out.top_starts.tolist(), out.top_ends.tolist(), strict=True))
    # span 1 -> span 0, span 2 -> span 1; the rest -> dummy.
    for i, j in ((1, 0), (2, 1)):
        column = out.antecedents[i].tolist().index(j) + 1
        scores[i, column] = 1.0
    out.scores = scores
    assert predict_clusters(out) == [[spans[0], spans[1], spans[2]]] and k >= 3


# ---------------------------------------------------------------- generated documents


def conll_text(documents):
    lines = []
    for name, words, mentions in documents:
        lines.append(f"#begin document ({name}); part 000")
        coref = {}
        for position, cluster in mentions:
            coref[position] = f"({cluster})"
        for sentence in range(0, len(words), 13):
            for i in range(sentence, min(sentence + 13, len(words))):
                lines.append(f"{name}\t0\t{i - sentence}\t{words[i]}\tNN\t*\t-\t-\t-\tspk\t*\t{coref.get(i, '-')}")
            lines.append("")
        lines.append("#end document")
    return "\n".join(lines) + "\n"


def documents(n, seed):
    """``(name, words, [(position, cluster)])``: two named entities, each after a run of
    CUES words of its colour; a pronoun at every segment start, after a run of the colour
    of the entity it refers to (the run ends at the segment boundary)."""
    rng = random.Random(seed)
    docs = []
    for d in range(n):
        names, colors = rng.sample(NAMES, 2), rng.sample(COLORS, 2)
        words = [rng.choice(FILL) for _ in range(WORDS)]
        mentions = []
        for entity, position in enumerate(NAME_AT):
            words[position] = names[entity]
            mentions.append((position, entity + 1))
            for i in range(CUES):
                words[position - 1 - i] = colors[entity]
        for b in range(SEGMENT, WORDS, SEGMENT):
            entity = rng.randrange(2)
            words[b] = "it"
            mentions.append((b, entity + 1))
            for i in range(CUES):
                words[b - 1 - i] = colors[entity]
        docs.append((f"gen/doc{seed}_{d}", words, mentions))
    return docs


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The generated CoNLL files, the BPE, ``prep coref``, and a briefly pretrained tiny
    RoBERTa converted to 2,048 positions (w = 32) and to 128."""
    tmp = tmp_path_factory.mktemp("coref")
    train, valid = documents(60, 1), documents(20, 2)
    (tmp / "train_gold_conll").write_text(conll_text(train))
    (tmp / "valid_gold_conll").write_text(conll_text(valid))
    (tmp / "bpe").mkdir()
    train_bpe([" ".join(words) for _, words, _ in train] * 2, tmp / "bpe", 400)
    bpe = ["--encoder-json", tmp / "bpe" / "encoder.json", "--vocab-bpe", tmp / "bpe" / "vocab.bpe"]
    log = ok("prep", "coref", "--train", tmp / "train_gold_conll", "--valid", tmp / "valid_gold_conll", *bpe,
             "--dict", tmp / "bpe" / "dict.txt", "--max-tokens", "128", "--out", tmp / "data")  # fmt: skip
    # The masked-LM corpus of the "released" RoBERTa: the training documents' tokens.
    (tmp / "mlm").mkdir()
    for ext in ("bin", "idx"):
        (tmp / "mlm" / f"train.{ext}").symlink_to(tmp / "data" / f"train.tokens.{ext}")
    (tmp / "mlm" / "dict.txt").symlink_to(tmp / "bpe" / "dict.txt")
    (tmp / "roberta").mkdir()
    # 250 updates: attention that carries a word's neighbours into its features (see above).
    roberta = pretrain_roberta(tmp / "mlm", tmp / "bpe" / "dict.txt", tmp / "roberta", updates=250)
    for name, positions in (("long", "2048"), ("short", "128")):
        ok("convert-roberta", roberta, "--out", tmp / f"converted_{name}", "--max-positions", positions,
           "--window", "32")  # fmt: skip
    return {"tmp": tmp, "prep_log": log}


TASK = ["--task", "longformer_coref", "--criterion", "longformer_coref", "--arch", "longformer_roberta",
        "--attention-window", "32", "--max-span-width", "1", "--ffnn-size", "64", "--feature-size", "8",
        "--head-dropout", "0"]  # fmt: skip


def train_args(work, name, positions):
    """fairseq-train's arguments for the span model on whole documents, one per batch."""
    tmp = work["tmp"]
    return finetune_args(tmp / "data", tmp / f"model_{name}", *TASK, "--max-positions", positions,
                            "--finetune-from-model", tmp / f"converted_{name}" / "model.pt",
                            "--validate-interval", "1000", updates=142, batch_size=1)  # fmt: skip


def eval_coref(checkpoint, data, *extra):
    return json.loads(ok("eval-coref", checkpoint, "--data", data, "--json", *extra))


@pytest.fixture(scope="module")
def models(work):
    runs = {"long": train_args(work, "long", "2048"), "short": train_args(work, "short", "128")}
    return {name: fairseq("fairseq-train", *args) for name, args in runs.items()}


def test_miniature_long_context_beats_128_token_segments(work, models):
    tmp = work["tmp"]
    stats = json.loads((tmp / "data" / "stats.json").read_text())["splits"]
    assert stats["train"]["tokens"] == 60 * WORDS  # one token per word: the segment arithmetic holds
    assert stats["valid"]["multi_segment"] == 20
    long = eval_coref(tmp / "model_long" / "checkpoint_best.pt", tmp / "data", "--predictions", tmp / "pred.jsonl")
    short = eval_coref(tmp / "model_short" / "checkpoint_best.pt", tmp / "data")
    RESULTS["Longformer, one 2,048-position segment (w = 32)"] = long["conll_f1"]
    RESULTS["same model, 128-position segments (RoBERTa's setting)"] = short["conll_f1"]
    assert long["documents"] == short["documents"] == 20
    assert long["conll_f1"] >= 80 and long["conll_f1"] >= short["conll_f1"] + 25, (long, short)
    predictions = [json.loads(line) for line in (tmp / "pred.jsonl").read_text().splitlines()]
    assert len(predictions) == 20 and all(isinstance(p["clusters"], list) for p in predictions)


def test_segments_are_joined_into_the_document(work, models):
    """The collater's rows (``<s>`` + 126 tokens + ``</s>``) and ``document_features``
    against each segment run alone through the model and joined by hand."""
    from longformer_fs.checkpoint import load_model
    from longformer_fs.tasks.coref import COREF_HEAD, CorefDataset

    model, task = load_model(work["tmp"] / "model_long" / "checkpoint_best.pt", work["tmp"] / "data")
    parts = task.load_parts("valid", ("tokens", "sentence", "speaker", "mentions"))
    dataset = CorefDataset(parts, task.dictionary, 128)
    batch = dataset.collater([dataset[0], dataset[1]])  # two documents of 5 rows each
    tokens = batch["net_input"]["src_tokens"]
    assert tokens.shape == (10, 128) and (tokens[:, 0] == 0).all()
    with torch.no_grad():
        features, _ = model(**batch["net_input"], features_only=True)
        for d, doc in enumerate(batch["documents"]):
            ids = parts["tokens"][d]
            assert torch.equal(tokens.reshape(-1)[doc["token_index"]], ids)
            alone = [model(row[None], features_only=True)[0][0, 1:-1] for row in dataset[d]["segments"]]
            torch.testing.assert_close(document_features(features, doc["token_index"]), torch.cat(alone))
            assert doc["segment"].tolist() == [i // 126 for i in range(len(ids))]
    assert COREF_HEAD in model.token_heads


def links(clusters) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    """Every pair of mentions (word spans) that ``clusters`` puts together."""
    return {(a, b) for cluster in clusters for a in map(tuple, cluster) for b in map(tuple, cluster) if a < b}


def test_the_hub_finds_the_documents_gold_clusters(work, models):
    """The hub on the prepared validation split, against the generated documents' own gold
    clusters (the CoNLL files' input, not eval-coref's code): the long model links the
    pronouns to the entities they name, in word spans of the documents as written."""
    from longformer_fs import from_pretrained

    checkpoint = work["tmp"] / "model_long" / "checkpoint_best.pt"
    predicted = {p["id"]: p["clusters"] for p in from_pretrained(checkpoint).predict_prepared(work["tmp"] / "data")}
    gold = {name: [[[i, i] for i, c in mentions if c == cluster] for cluster in (1, 2)]
            for name, _, mentions in documents(20, 2)}  # fmt: skip
    assert sorted(predicted) == sorted(gold)
    right = sum(len(links(predicted[name]) & links(gold[name])) for name in gold)
    found = sum(len(links(predicted[name])) for name in gold)
    true = sum(len(links(gold[name])) for name in gold)
    assert right / found > 0.8 and right / true > 0.8, (right, found, true)


def test_export_hf_refuses_a_coref_checkpoint_in_one_line(work, models, tmp_path):
    err = fails("export-hf", work["tmp"] / "model_long" / "checkpoint_best.pt", "--out", tmp_path / "hf")
    assert "coreference" in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------- the recipe: hydra and make

SMALL = ["dataset.num_workers=0", "model.max_positions=2048",
         "task.max_positions=2048", "model.attention_window='32'", "model.dropout=0", "model.attention_dropout=0",
         "++model.encoder_layers=2", "++model.encoder_embed_dim=64", "++model.encoder_ffn_embed_dim=128",
         "++model.encoder_attention_heads=4", "task.max_span_width=1", "task.top_span_ratio=0.05",
         "task.max_top_antecedents=8", "task.ffnn_size=64", "task.feature_size=8", "common.log_format=simple",
         "common.log_interval=1"]  # fmt: skip


@pytest.fixture(scope="module")
def small(work):
    """Four documents per split: what the recipe runs cost here is fairseq's start-up."""
    tmp = work["tmp"]
    (tmp / "small_train_gold_conll").write_text(conll_text(documents(4, 3)))
    (tmp / "small_valid_gold_conll").write_text(conll_text(documents(2, 4)))
    ok("prep", "coref", "--train", tmp / "small_train_gold_conll", "--valid", tmp / "small_valid_gold_conll",
       "--encoder-json", tmp / "bpe" / "encoder.json", "--vocab-bpe", tmp / "bpe" / "vocab.bpe",
       "--dict", tmp / "bpe" / "dict.txt", "--out", tmp / "small")  # fmt: skip
    return tmp / "small"


def test_shipped_recipe_trains_two_learning_rates_under_hydra(work, small, tmp_path):
    tmp = work["tmp"]
    log = fairseq("fairseq-hydra-train", "--config-dir", ROOT / "recipes" / "finetune", "--config-name", "coref",
                  f"task.data={small}", f"checkpoint.save_dir={tmp_path}",
                  f"checkpoint.finetune_from_model={tmp / 'converted_long' / 'model.pt'}", *SMALL,
                  "optimization.max_update=3", "lr_scheduler.warmup_updates=2",
                  "lr_scheduler.total_num_update=10")  # fmt: skip
    assert "num_updates=3" in log
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    groups = state["last_optimizer_state"]
    encoder_lr, head_lr = (groups[g]["param_groups"][0]["lr"] for g in ("default", "coref_head"))
    # After 3 of 10 updates (2 of warmup): 1e-5 and 2e-4 decayed by (10 - 3) / (10 - 2).
    assert encoder_lr == pytest.approx(1e-5 * 7 / 8) and head_lr == pytest.approx(2e-4 * 7 / 8)
    head_params = sum(p.numel() for k, p in state["model"].items() if k.startswith("token_heads.coref."))
    assert head_params == sum(p.numel() for s in groups["coref_head"]["state"].values() for p in [s["exp_avg"]])
