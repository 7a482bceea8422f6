"""docs/mlm.md's journeys, the README's second among them: continued MLM pretraining from the
released Longformer (imported from the hub's layout, a Wikipedia dump prepared with its
tokenizer, the recipe run by fairseq-hydra-train itself), from fairseq's RoBERTa release
(``make mlm-base``, then out to HF) and from XLM-R as the hub serves it (on to a French
classifier, back out to HF); and docs/data.md's corpus of every source kind."""

import json
import shutil

import pytest
import torch
from helpers import assert_refused_in_one_line
from hf_models import translations
from journey import Journey, Workspace
from releases import ARXIV_SENTENCES, write_dump, write_paper_pdf

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

# The released model's own sizes (conftest.longformer_hub), 512-token blocks, two updates.
TOY_RELEASED = " ".join([
    "++model.encoder_layers=2", "++model.encoder_embed_dim=32", "++model.encoder_ffn_embed_dim=64",
    "++model.encoder_attention_heads=4", "model.attention_window=\"'8'\"", "task.tokens_per_sample=512",
    "dataset.batch_size=2", "optimization.update_freq=[1]", "optimization.max_update=2", "dataset.num_workers=0",
])  # fmt: skip
# fairseq's RoBERTa release here (helpers.FINETUNE_SIZES), converted with the default window.
TOY_ROBERTA = " ".join([
    "++model.encoder_layers=2", "++model.encoder_embed_dim=64", "++model.encoder_ffn_embed_dim=128",
    "++model.encoder_attention_heads=4", "task.tokens_per_sample=512", "dataset.batch_size=2",
    "optimization.update_freq=[1]", "optimization.max_update=2", "dataset.num_workers=0",
])  # fmt: skip


def test_continued_pretraining_of_the_released_model(longformer_hub, tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    (workspace.root / "longformer-base-4096").symlink_to(longformer_hub)
    write_dump(workspace.path("enwiki-pages-articles.xml.bz2"), 0.05)
    logs = Journey("mlm-released", {"fairseq-hydra-train": TOY_RELEASED}).run(workspace)
    train = next(log for step, log in logs.items() if step.startswith("fairseq-hydra-train"))
    assert "recipe longformer_base_4096 trains in float32 (common.fp16=false)" in train
    state = torch.load(workspace.path("checkpoints/mlm/base_4096/checkpoint_last.pt"), weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 2


def test_continued_pretraining_from_roberta_out_to_hf(roberta_base, gpt2, tmp_path):
    from transformers import LongformerForMaskedLM

    workspace = Workspace(tmp_path / "checkout")
    (workspace.root / "roberta.base").symlink_to(roberta_base)
    (workspace.root / "gpt2").symlink_to(gpt2)
    write_dump(workspace.path("enwiki-pages-articles.xml.bz2"), 0.05)
    logs = Journey("mlm-roberta", {"make mlm-base": f'HYDRA_ARGS="{TOY_ROBERTA}"'}).run(workspace)
    make = next(log for step, log in logs.items() if step.startswith("make mlm-base"))
    assert "recipe longformer_base_4096 trains in float32 (common.fp16=false)" in make
    export = next(log for step, log in logs.items() if step.startswith("longformer-fs export-hf"))
    assert "dictionary: " + str(workspace.path("data-bin/longdocs/dict.txt")) in export  # named by the checkpoint
    model = LongformerForMaskedLM.from_pretrained(workspace.path("hf"))
    assert model.config.max_position_embeddings == 4096 + 2 and model.config.attention_window == [512, 512]

    checkpoint = workspace.path("checkpoints/mlm/base_4096/checkpoint_last.pt")
    assert_refused_in_one_line(
        workspace.root,
        ["export-hf", "{checkpoint}", "--out", "hf/", "--tokenizer", "gpt2/"],
        tmp_path / "bad",
        checkpoint,
    )


def xlmr_base(tokenizer, out) -> None:
    """``xlm-roberta-base/`` as the hub serves it, at the sizes of TOY_ROBERTA: transformers'
    XLM-R with 512 positions and XLM-R's SentencePiece tokenizer (``tokenizer``'s files)."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaTokenizer

    shutil.copytree(tokenizer, out)
    vocab = len(XLMRobertaTokenizer.from_pretrained(str(out)))
    config = XLMRobertaConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=128, max_position_embeddings=514, layer_norm_eps=1e-5,
                              type_vocab_size=1)  # fmt: skip
    XLMRobertaForMaskedLM(config).save_pretrained(out)


def test_a_long_model_in_your_language(xlmr_tokenizer, tmp_path):
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        LongformerForSequenceClassification,
        XLMRobertaTokenizer,
    )

    workspace = Workspace(tmp_path / "checkout")
    xlmr_base(xlmr_tokenizer["dir"], workspace.path("xlm-roberta-base"))
    write_dump(workspace.path("frwiki-pages-articles.xml.bz2"), 0.05)
    french = [t for t in translations("fr", 400) if len(t.split()) >= 3][:40]
    rows = [{"text": text, "label": i % 2} for i, text in enumerate(french)]
    workspace.path("avis.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    logs = Journey("mlm-language", {"make mlm-base": f'HYDRA_ARGS="{TOY_ROBERTA}"',
                                    "make finetune-": 'HYDRA_ARGS="optimization.max_update=2 dataset.num_workers=0"'},
                   ).run(workspace)  # fmt: skip
    make = next(log for step, log in logs.items() if step.startswith("make mlm-base"))
    assert "recipe longformer_base_4096 trains in float32 (common.fp16=false)" in make
    finetune = next(log for step, log in logs.items() if step.startswith("make finetune-imdb"))
    assert "recipe imdb trains in float32 (common.fp16=false)" in finetune
    model = AutoModelForSequenceClassification.from_pretrained(workspace.path("hf-avis"))
    assert isinstance(model, LongformerForSequenceClassification) and model.config.max_position_embeddings == 4098
    exported = AutoTokenizer.from_pretrained(str(workspace.path("hf-avis")))
    assert type(exported).__name__.startswith("XLMRobertaTokenizer")
    assert (
        exported(french)["input_ids"]
        == XLMRobertaTokenizer.from_pretrained(str(workspace.path("xlm-roberta-base")))(french)["input_ids"]
    )


def test_a_corpus_of_every_source_kind(roberta_base, gpt2, tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    (workspace.root / "roberta.base").symlink_to(roberta_base)
    (workspace.root / "gpt2").symlink_to(gpt2)
    (workspace.root / "books").mkdir()
    for i in range(3):
        workspace.path(f"books/book{i}.txt").write_text(" ".join(ARXIV_SENTENCES * (i + 2)))
    write_dump(workspace.path("enwiki-pages-articles.xml.bz2"), 0.05)
    long_news = {"text": " ".join(ARXIV_SENTENCES * 40)}  # over --min-tokens realnews=1200
    workspace.path("realnews.jsonl").write_text(json.dumps(long_news) + "\n" + json.dumps({"text": "Short."}) + "\n")
    workspace.path("stories.jsonl").write_text("".join(json.dumps({"text": s * 3}) + "\n" for s in ARXIV_SENTENCES))
    (workspace.root / "papers").mkdir()
    write_paper_pdf(workspace.path("papers/paper.pdf"), "Long Attention", ARXIV_SENTENCES[:2], ARXIV_SENTENCES)
    Journey("docs-corpus").run(workspace)
    stats = json.loads(workspace.path("data-bin/longdocs/stats.json").read_text())
    assert {"books", "wiki", "realnews", "stories", "papers"} <= set(stats["sources"]), stats
    papers = [json.loads(line) for line in workspace.path("data-bin/longdocs/papers.jsonl").read_text().splitlines()]
    assert papers[0]["title"] == "Long Attention"
