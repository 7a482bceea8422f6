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


def fairseq_train(data, *extra):
    exe = Path(sys.executable).parent / "fairseq-train"
    if not exe.exists():
        pytest.skip("fairseq-train is not installed next to this interpreter")
    cmd = [
        str(exe),
        str(data),
        *TINY_CHAR_LM,
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
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
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
