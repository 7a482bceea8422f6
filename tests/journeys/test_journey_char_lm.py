"""docs/char-lm.md's journeys, which the README's first repeats, and docs/data.md's: text8
fetched and prepared (here from a mirror given by ``--url``, a zip in the release's layout
at toy size); the five phases of ``make text8`` at toy size, each starting from the last;
``make eval-bpc`` on the result; ``longformer-fs sample`` writing with it. And the two
corpora prepared from their zips."""

import json
import math
import re

import numpy as np
import pytest
import torch
from helpers import assert_refused_in_one_line
from journey import Journey, Workspace
from releases import write_char_zip

from longformer_fs import from_pretrained

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

SPLITS = "16000,2000,2000"
TOY = " ".join([
    "model.decoder_layers=2", "model.decoder_embed_dim=32", "model.decoder_ffn_embed_dim=64",
    "model.decoder_attention_heads=4", "model.attention_dilation=\\\"'1,2'\\\"",  # quoted for make's shell
    "task.tokens_per_sample=64", "dataset.batch_size=8", "optimization.max_update=4", "lr_scheduler.warmup_updates=1",
    "dataset.num_workers=0", "dataset.validate_interval_updates=4", "checkpoint.save_interval_updates=4",
])  # fmt: skip


WORDS = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far"]
ALPHABET = set(b" ".join(WORDS).decode())


def text(seed: int, size: int) -> bytes:
    rng = np.random.default_rng(seed)
    words = WORDS
    return b" ".join(words[i] for i in rng.integers(0, len(words), size // 2))[:size]


def test_text8_through_five_phases_to_bpc(tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    mirror = write_char_zip(tmp_path / "mirror.zip", "text8", text(0, 20000))
    journey = Journey("char-lm", {
        "longformer-fs prep text8": f"--url file://{mirror} --skip-checksum --split-sizes {SPLITS}",
        "make text8": f'HYDRA_ARGS="{TOY}"',
    })  # fmt: skip
    journey.run(workspace)

    saved = workspace.path("checkpoints/char_lm/text8/small")
    for phase in range(1, 6):
        state = torch.load(saved / f"phase{phase}" / "checkpoint_last.pt", weights_only=False)
        assert state["optimizer_history"][-1]["num_updates"] == 4
    # Each phase after the first starts from the one before (finetune_from_model), with its own windows.
    assert state["cfg"]["checkpoint"]["finetune_from_model"] == str(saved / "phase4" / "checkpoint_last.pt")
    # eval-bpc's figure is the model's own: its window covers the 2,000-character test split,
    # so every character is scored once after all before it, as one forward pass here does.
    printed = next(out for step, out in journey.stdout.items() if step.startswith("make eval-bpc"))
    bpc = float(re.search(r"test BPC (\d+\.\d+) over 2,000 characters", printed)[1])
    lm = from_pretrained(saved / "phase5", "checkpoint_last.pt")
    ids = lm.encode(text(0, 20000)[18000:].decode())[:-1]
    with torch.no_grad():
        logits = lm.model(torch.cat([torch.tensor([lm.task.dictionary.eos()]), ids])[None])[0][0, :-1]
    nats = -torch.log_softmax(logits.double(), -1).gather(1, ids[:, None]).mean()
    assert abs(bpc - float(nats) / math.log(2)) < 1e-3, (bpc, float(nats) / math.log(2))
    # sample writes the 200 characters alone on its standard output.
    written = next(out for step, out in journey.stdout.items() if step.startswith("longformer-fs sample"))
    assert written.endswith("\n") and len(written[:-1].encode()) == 200 and set(written[:-1]) <= set(ALPHABET)

    assert_refused_in_one_line(
        workspace.root, ["eval-bpc", "{checkpoint}", "--data", "data-bin/text8"], tmp_path / "bad",
        saved / "phase5" / "checkpoint_last.pt",
    )  # fmt: skip


def test_both_corpora_from_their_zips(tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    write_char_zip(workspace.path("text8.zip"), "text8", text(1, 20000))
    write_char_zip(workspace.path("enwik8.zip"), "enwik8", text(2, 20000).replace(b" ", b"\n", 50))
    Journey("char-data", {"longformer-fs prep": f"--skip-checksum --split-sizes {SPLITS}"}).run(workspace)
    for corpus in ("text8", "enwik8"):
        manifest = json.loads(workspace.path(f"data-bin/{corpus}/prep.json").read_text())
        assert manifest["tokens"] == {"train": 16000, "valid": 2000, "test": 2000}
