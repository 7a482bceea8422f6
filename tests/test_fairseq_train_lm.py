"""Real fairseq-train processes with --user-dir on tiny generated character data."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_CHAR_LM

from data_prep.char_corpus import prepare

ROOT = Path(__file__).resolve().parents[1]
SPLITS = (16000, 2000, 2000)


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("char")
    rng = np.random.default_rng(0)
    words = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far"]
    text = b" ".join(words[i] for i in rng.integers(0, len(words), 6000))[: sum(SPLITS)]
    with zipfile.ZipFile(tmp / "text8.zip", "w") as archive:
        archive.writestr("text8", text)
    prepare("text8", tmp / "bin", tmp / "text8.zip", verify=False, split_sizes=SPLITS)
    return tmp / "bin"


def run_fairseq_train(data, *extra, model=TINY_CHAR_LM):
    """fairseq-train on ``data`` with the ``model`` options: its CompletedProcess."""
    exe = Path(sys.executable).parent / "fairseq-train"
    if not exe.exists():
        pytest.skip("fairseq-train is not installed next to this interpreter")
    cmd = [
        str(exe),
        str(data),
        *model,
        "--batch-size",
        "8",
        "--optimizer",
        "adam",
        "--lr",
        "3e-3",
        "--criterion",
        "bpc_cross_entropy",
        "--log-format",
        "json",
        "--log-interval",
        "10",
        "--cpu",
        "--num-workers",
        "0",
        "--dropout",
        "0.0",
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)


def fairseq_train(data, *extra):
    """fairseq-train that must succeed: its train_inner and valid log entries."""
    result = run_fairseq_train(data, *extra)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    logs = []
    for line in (result.stdout + result.stderr).splitlines():
        for tag in ("train_inner", "valid"):
            marker = f"| {tag} | "
            if marker in line:
                logs.append((tag, json.loads(line.split(marker, 1)[1])))
    return logs


def test_training_lowers_bpc_and_scores_every_valid_character(data_bin, tmp_path):
    logs = fairseq_train(data_bin, "--max-update", "40", "--save-dir", str(tmp_path / "ckpt"), "--no-epoch-checkpoints")
    train = [float(entry["bpc"]) for tag, entry in logs if tag == "train_inner"]
    valid = [entry for tag, entry in logs if tag == "valid"]
    assert len(train) >= 3 and train[-1] < 0.6 * train[0], train
    assert valid and all(int(float(v["valid_scored"])) == SPLITS[1] for v in valid)
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").is_file()


def test_eval_bpc_on_the_trained_checkpoint(data_bin, tmp_path):
    import json

    fairseq_train(data_bin, "--max-update", "20", "--save-dir", str(tmp_path / "ckpt"), "--no-epoch-checkpoints")
    out = tmp_path / "eval.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "longformer_fs.cli",
            "eval-bpc",
            str(tmp_path / "ckpt" / "checkpoint_last.pt"),
            "--data",
            str(data_bin),
            "--window",
            "200",
            "--step",
            "50",
            "--batch-size",
            "4",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["scored"] == summary["split_chars"] == SPLITS[2]
    assert 0.5 < summary["bpc"] < 4.0
    missing = subprocess.run(
        [sys.executable, "-m", "longformer_fs.cli", "eval-bpc", str(tmp_path / "nope.pt"), "--data", str(data_bin)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert missing.returncode == 2 and "checkpoint:" in missing.stderr


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
    from longformer_fs.evaluation.checkpoint import load_model

    return load_model(path, data)[0]


def test_the_old_flags_still_train_and_say_which_to_use(data_bin, tmp_path):
    old = [OLD_SPELLING.get(arg, arg) for arg in TINY_CHAR_LM]
    save = tmp_path / "ckpt"
    result = run_fairseq_train(data_bin, "--max-update", "2", "--save-dir", str(save), "--no-epoch-checkpoints",
                               "--disable-validation", model=old)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "--attention-windows (model.attention_windows) is deprecated; use --attention-window" in log
    assert "--attention-dilations (model.attention_dilations) is deprecated; use --attention-dilation" in log
    shape = load(save / "checkpoint_last.pt", data_bin).decoder.net.shape
    assert (shape.windows, shape.dilations) == (TINY_WINDOWS, TINY_DILATIONS)


def test_the_two_spellings_disagreeing_stop_fairseq_train(data_bin):
    result = run_fairseq_train(data_bin, "--attention-windows", "8:32", "--max-update", "1", "--no-save")
    assert result.returncode != 0
    assert "'8:32' against '4:16'" in result.stderr and "give only --attention-window" in result.stderr


def test_a_checkpoint_with_the_old_keys_loads_the_same_model(data_bin, tmp_path):
    """A checkpoint written before the rename: its cfg.model holds only the plural keys."""
    import torch

    save = tmp_path / "ckpt"
    fairseq_train(data_bin, "--max-update", "2", "--save-dir", str(save), "--no-epoch-checkpoints",
                  "--disable-validation")  # fmt: skip
    state = torch.load(save / "checkpoint_last.pt", weights_only=False)
    old_names = {"attention_window": "attention_windows", "attention_dilation": "attention_dilations"}
    state["cfg"]["model"] = {
        old_names.get(key, key): value
        for key, value in state["cfg"]["model"].items()
        if key not in old_names.values()  # the deprecated fields (None here) did not exist then
    }
    assert set(state["cfg"]["model"]) == OLD_CFG_MODEL_KEYS
    torch.save(state, tmp_path / "old.pt")

    new, old = load(save / "checkpoint_last.pt", data_bin), load(tmp_path / "old.pt", data_bin)
    assert old.decoder.net.shape == new.decoder.net.shape
    assert (old.decoder.net.shape.windows, old.decoder.net.shape.dilations) == (TINY_WINDOWS, TINY_DILATIONS)
    tokens = torch.randint(4, len(new.decoder.dictionary), (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(old(tokens)[0], new(tokens)[0], rtol=0, atol=0)
