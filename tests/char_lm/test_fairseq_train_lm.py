"""fairseq-train with --user-dir, run in this process through its own entry point as fairseq's
tests run it, on tiny generated character data (conftest's char_corpus, and tiny_char_lm
trained on it once)."""

import logging
import random
import threading

import numpy as np
import torch
from helpers import TINY_CHAR_LM, cli, fairseq_json_logs, train_char_lm

from longformer_fs.report.recipe_runs import TEXT8_SPLITS as SPLITS


def test_training_lowers_bpc_and_scores_every_valid_character(tiny_char_lm):
    checkpoint, logs = tiny_char_lm  # 40 updates
    train = [float(entry["bpc"]) for tag, entry in logs if tag == "train_inner"]
    valid = [entry for tag, entry in logs if tag == "valid"]
    assert len(train) >= 3 and train[-1] < 0.6 * train[0], train
    assert valid and all(int(float(v["valid_scored"])) == SPLITS[1] for v in valid)
    assert checkpoint.is_file()


def test_eval_bpc_on_the_trained_checkpoint(char_corpus, tiny_char_lm, tmp_path):
    import json

    out = tmp_path / "eval.json"
    result = cli("eval-bpc", tiny_char_lm[0], "--data", char_corpus, "--window", "200", "--step", "50",
                 "--batch-size", "4", "--json", out)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["scored"] == summary["split_chars"] == SPLITS[2]
    assert 0.5 < summary["bpc"] < 4.0
    missing = cli("eval-bpc", tmp_path / "nope.pt", "--data", char_corpus)
    assert missing.returncode == 2 and "checkpoint:" in missing.stderr


def test_runs_in_one_process_leave_nothing_to_each_other(char_corpus, tmp_path):
    """Two trainings in this process, as two processes would run them: each saves its own best
    checkpoint and TensorBoard logs (fairseq keeps the best loss and the writers in globals),
    both log the same losses from the same seed, and the caller's RNGs and logging are
    as they were."""
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    handlers = list(logging.getLogger().handlers)
    losses = []
    for run in ("first", "second"):
        save = tmp_path / run
        result = train_char_lm(char_corpus, "--max-update", "2", "--save-dir", save, "--no-epoch-checkpoints",
                               "--validate-interval-updates", "2", "--tensorboard-logdir", save / "tb")  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:]
        assert (save / "checkpoint_best.pt").is_file() and any((save / "tb").rglob("events.*"))
        entries = fairseq_json_logs(result.stdout, ("train_inner", "valid"))
        losses.append([{k: v for k, v in entry.items() if "loss" in k or "bpc" in k} for _, entry in entries])
    assert losses[0] == losses[1] and losses[0]
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == before
    assert logging.getLogger().handlers == handlers
    from fairseq.data.iterators import BackgroundConsumer

    assert not [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]


# ---------------------------------------------------------------- the deprecated spellings

# The char LM's options as spelt before issue 22, and the model keys fairseq-train wrote
# into a checkpoint's cfg then (read from one trained with them at commit fb14f68).
OLD_SPELLING = {"--attention-window": "--attention-windows", "--attention-dilation": "--attention-dilations"}
OLD_CFG_MODEL_KEYS = {
    "_name", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads", "dropout",
    "attention_dropout", "attention_windows", "attention_dilations", "dilated_heads", "attention_backend",
    "checkpoint_activations", "max_target_positions",
}  # fmt: skip
TINY_WINDOWS, TINY_DILATIONS = (4, 16), ((1, 1, 1, 1), (1, 1, 2, 2))  # TINY_CHAR_LM's 4:16 and 1,2


def load(path, data):
    from longformer_fs.checkpoint import load_model

    return load_model(path, data)[0]


def test_the_old_flags_still_train_and_say_which_to_use(char_corpus, tmp_path):
    old = [OLD_SPELLING.get(arg, arg) for arg in TINY_CHAR_LM]
    save = tmp_path / "ckpt"
    result = train_char_lm(char_corpus, "--max-update", "2", "--save-dir", save, "--no-epoch-checkpoints",
                           "--disable-validation", model=old)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "--attention-windows (model.attention_windows) is deprecated; use --attention-window" in log
    assert "--attention-dilations (model.attention_dilations) is deprecated; use --attention-dilation" in log
    shape = load(save / "checkpoint_last.pt", char_corpus).decoder.net.shape
    assert (shape.windows, shape.dilations) == (TINY_WINDOWS, TINY_DILATIONS)


def test_the_two_spellings_disagreeing_stop_fairseq_train(char_corpus):
    result = train_char_lm(char_corpus, "--attention-windows", "8:32", "--max-update", "1", "--no-save")
    assert result.returncode != 0
    assert "'8:32' against '4:16'" in result.stderr and "give only --attention-window" in result.stderr


def test_a_checkpoint_with_the_old_keys_loads_the_same_model(char_corpus, tiny_char_lm, tmp_path):
    """A checkpoint written before the rename: its cfg.model holds only the plural keys."""
    checkpoint = tiny_char_lm[0]
    state = torch.load(checkpoint, weights_only=False)
    old_names = {"attention_window": "attention_windows", "attention_dilation": "attention_dilations"}
    state["cfg"]["model"] = {
        old_names.get(key, key): value
        for key, value in state["cfg"]["model"].items()
        # The deprecated fields (None here) did not exist then, nor did compile_layers.
        if key not in old_names.values() and key != "compile_layers"
    }
    assert set(state["cfg"]["model"]) == OLD_CFG_MODEL_KEYS
    torch.save(state, tmp_path / "old.pt")

    new, old = load(checkpoint, char_corpus), load(tmp_path / "old.pt", char_corpus)
    assert old.decoder.net.shape == new.decoder.net.shape
    assert (old.decoder.net.shape.windows, old.decoder.net.shape.dilations) == (TINY_WINDOWS, TINY_DILATIONS)
    tokens = torch.randint(4, len(new.decoder.dictionary), (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(old(tokens)[0], new(tokens)[0], rtol=0, atol=0)
