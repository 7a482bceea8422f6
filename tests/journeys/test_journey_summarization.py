"""docs/summarization.md's journeys, the README's LED steps among them: from the released LED
(imported from the hub's layout, also with its positions doubled) and from fairseq's BART
release, through ``make summarize-arxiv`` on the arXiv files as released, to summaries of
PDFs, text and JSONL, ROUGE, and back out to HF."""

import json

import pytest
from helpers import BART_SIZES, assert_refused_in_one_line
from journey import Journey, Workspace
from releases import ARXIV_SENTENCES, write_arxiv_release, write_paper_pdf

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

# Two updates of the LED recipe on the given model's sizes; short summaries.
TRAIN_SHORT = ["dataset.batch_size=2", "optimization.update_freq=[1]", "optimization.max_update=2",
               "dataset.num_workers=0"]  # fmt: skip
SHORT = "--min-len 2 --max-len 8"
LED_SIZES = {"encoder_layers": 2, "decoder_layers": 2, "encoder_embed_dim": 32, "decoder_embed_dim": 32,
             "encoder_ffn_embed_dim": 64, "decoder_ffn_embed_dim": 64, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4}  # fmt: skip


def hydra_args(sizes: dict) -> str:
    return 'HYDRA_ARGS="' + " ".join([*(f"++model.{k}={v}" for k, v in sizes.items()), *TRAIN_SHORT]) + '"'


def summaries(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def summarization_steps(sizes: dict) -> dict:
    """A summarization journey's overrides: two updates on ``sizes``, short summaries."""
    return {"make summarize-arxiv": f'{hydra_args(sizes)} SUMMARIZE_ARGS="{SHORT}"', "longformer-fs summarize": SHORT}


def summarization_journey(tmp_path, journey: Journey, models: dict) -> tuple[Workspace, dict]:
    """Runs ``journey`` in a checkout holding ``models`` (``{directory: source}``), the arXiv
    files as released and the papers to summarize."""
    workspace = Workspace(tmp_path / "checkout")
    for directory, source in models.items():
        (workspace.root / directory).symlink_to(source)
    write_arxiv_release(workspace.root)
    write_papers(workspace)
    return workspace, journey.run(workspace)


def write_papers(workspace: Workspace) -> None:
    for name in ("paper.pdf", "paper1.pdf"):
        write_paper_pdf(workspace.path(name), "Long Attention", ARXIV_SENTENCES[:2], ARXIV_SENTENCES * 2)
    workspace.path("notes.txt").write_text(" ".join(ARXIV_SENTENCES))
    workspace.path("docs.jsonl").write_text(json.dumps({"id": "doc-1", "text": " ".join(ARXIV_SENTENCES)}) + "\n")


def test_led_from_the_released_model(led_hub, bart_hub, tmp_path):
    from transformers import LEDForConditionalGeneration

    models = {"led-large-16384": led_hub, "bart-large": bart_hub}
    workspace, logs = summarization_journey(tmp_path, Journey("led-released", summarization_steps(LED_SIZES)), models)
    make = next(log for step, log in logs.items() if step.startswith("make summarize-arxiv"))
    assert "recipe led_large_16k trains in float32 (common.fp16=false)" in make and "ROUGE (test" in make
    longer = json.loads(workspace.path("ckpt/led-large-32k/import-hf.json").read_text())
    assert longer["positions"] == [16384, 32768]
    model = LEDForConditionalGeneration.from_pretrained(workspace.path("hf_led"))
    assert model.config.max_encoder_position_embeddings == 16384


def test_led_from_bart(bart_base, gpt2, tmp_path):
    models = {"bart.large": bart_base, "gpt2": gpt2}
    workspace, logs = summarization_journey(tmp_path, Journey("led-bart", summarization_steps(BART_SIZES)), models)
    written = summaries(workspace.path("summaries.jsonl"))
    assert [s["id"] for s in written] == ["paper1.pdf", "notes.txt", "doc-1"]
    rouge = next(log for step, log in logs.items() if step.startswith("longformer-fs rouge"))
    assert "documents: 2" in rouge and "ROUGE-Lsum" in rouge

    checkpoint = workspace.path("checkpoints/summarization/large_16k/checkpoint_best.pt")
    for command in (
        ["summarize", "{checkpoint}", "paper.pdf", "--encoder-json", "gpt2/encoder.json", "--vocab-bpe",
         "gpt2/vocab.bpe", "--out", "summaries.jsonl"],
        ["export-hf", "{checkpoint}", "--out", "hf_led/"],
    ):  # fmt: skip
        assert_refused_in_one_line(workspace.root, command, tmp_path / "bad", checkpoint)
