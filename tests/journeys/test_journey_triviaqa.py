"""docs/finetune.md's TriviaQA journey, which the README's fine-tuning repeats: a released
Longformer as the hub serves it, imported; TriviaQA as released, prepared with the imported
tokenizer; ``make finetune-triviaqa`` on this CPU; ``eval-qa``, the test file's official
predictions and the verified score; back out to HF, where transformers loads the model
and gives our logits."""

import json

import pytest
import torch
from helpers import assert_refused_in_one_line
from journey import Journey, Workspace
from releases import write_triviaqa_release

from longformer_fs.checkpoint import load_model

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

JOURNEY = Journey("triviaqa")
NOTICE = "recipe triviaqa trains in float32 (common.fp16=false)"


def test_triviaqa_from_the_released_model_to_hf(longformer_hub, tmp_path):
    from transformers import LongformerForQuestionAnswering

    workspace = Workspace(tmp_path / "checkout")
    (workspace.root / "longformer-base-4096").symlink_to(longformer_hub)
    write_triviaqa_release(workspace.root)
    logs = JOURNEY.run(workspace)

    make = next(log for step, log in logs.items() if step.startswith("make finetune-triviaqa"))
    assert NOTICE in make and "valid (questions): EM" in make
    # The recipe takes the released model's sizes, windows (16 and 32 in HF: 8 and 16 a side, one
    # per layer) and positions; the model it trains has them, layer by layer.
    assert "++model.encoder_embed_dim=32" in make and "++model.attention_window='8,16'" in make
    assert "task.max_positions=4096" in make
    official = json.loads(workspace.path("wikipedia-predictions.json").read_text())
    assert set(official) == {"tc_33", "tc_51"}  # the test file's questions, answered without gold

    # transformers loads the export, and its span logits are ours.
    checkpoint = workspace.path("checkpoints/finetune/triviaqa/checkpoint_best.pt")
    theirs = LongformerForQuestionAnswering.from_pretrained(workspace.path("hf_triviaqa")).eval()
    ours, _ = load_model(checkpoint, workspace.path("data-bin/triviaqa"))
    assert [layer.self_attn.window for layer in ours.encoder.sentence_encoder.layers] == [8, 16]
    tokens = torch.tensor([[0, 40, 41, 42, 2, 50, 51, 52, 53, 54, 2]])
    question = torch.zeros_like(tokens, dtype=torch.bool)
    question[0, :5] = True
    with torch.no_grad():
        hf = theirs(input_ids=tokens, global_attention_mask=question.long())
        features, _ = ours(tokens, global_attention_mask=question, features_only=True)
        start, end = ours.token_logits("qa", features).unbind(-1)
    torch.testing.assert_close(hf.start_logits, start, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(hf.end_logits, end, atol=1e-4, rtol=1e-4)

    for command in (
        ["eval-qa", "{checkpoint}", "--data", "data-bin/triviaqa"],
        ["export-hf", "{checkpoint}", "--out", "hf_triviaqa/", "--tokenizer", "longformer-base-4096/"],
    ):
        assert_refused_in_one_line(workspace.root, command, tmp_path / "bad", checkpoint)
