"""The cold lane: each entry point a user types, once, in a new interpreter.

Everywhere else the suite's commands start warm (tests/zygote.py): a fork of a server
that has imported torch, fairseq, transformers and the plugin. What only a new
interpreter shows is tested here, through this venv's own commands as a user's shell
starts them (``real=True``), each checked by what it wrote, not only its exit status:

- ``fairseq-train --user-dir longformer_fs``, and ``torchrun`` through the launcher: the
  shutdown test (the interpreter's end is what it tests);
- ``fairseq-train`` on our task and architecture without ``--user-dir``: fairseq's own
  refusal (warm, the plugin is already registered and it would train);
- ``fairseq-hydra-train`` on a recipe, whose ``common.user_dir`` (and its precision
  callback, ``longformer_fs.precision.FitToDevice``) load the plugin;
- ``fairseq-interactive``, ``fairseq-eval-lm`` and ``fairseq-generate`` on a character LM;
- ``longformer-fs prep`` and ``export-hf``.

``export-onnx`` and ``summarize-onnx`` (and ``import-hf``) run cold in the deploy-LED
journey (tests/journeys/test_journey_deploy_led.py), whose workspace's venv is this one
rather than the warm view: an LED's three ONNX files cost 40 s to trace, once is enough.
"""

import concurrent.futures
import os
import re
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    BIN,
    CHAR_LM_TRAINING,
    ON_CPU,
    ROOT,
    TINY_CHAR_LM,
    USER_DIR,
    argmax_continuation,
    cli,
    command,
    free_port,
    ok,
    read_char_split,
    run,
)

from longformer_fs import from_pretrained
from longformer_fs.commands.demo import TOY_MODEL, ToyPhase

pytestmark = pytest.mark.slow  # a new interpreter for each command a user types


def test_fairseq_tools_read_and_write_text(tiny_char_lm, char_corpus):
    """fairseq's own tools on a character LM, with no flag but their usual ones: the task
    reads a line of text as its UTF-8 bytes and shows bytes as text (tasks/char_lm.py).
    Oracles: the argmax of the model over the text, and the valid split's bytes, read from
    its ``.bin`` through the ``0xHH`` symbols of ``dict.txt``."""
    checkpoint, common = tiny_char_lm[0], ["--task", "longformer_char_lm", "--user-dir", USER_DIR, "--cpu"]
    # fairseq-interactive: the prompt (fairseq strips the line) and its greedy continuation, as text.
    result = subprocess.run(command([BIN / "fairseq-interactive", char_corpus, "--path", checkpoint, *common,
                                     "--beam", "1", "--max-len-b", "30"], real=True),  # fmt: skip
                            input="the cat \n", capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("D-0")]
    text = line.split("\t")[2]
    assert text.startswith("the cat") and len(text) > len("the cat") and "0x" not in text, line
    hub = from_pretrained(checkpoint)
    predicted, written = argmax_continuation(hub, "the cat", text[len("the cat") :])
    assert predicted == written
    # fairseq-eval-lm --output-word-probs: block k of 64 bytes, each byte its character.
    valid = read_char_split(char_corpus, "valid").decode()
    log = run(BIN / "fairseq-eval-lm", char_corpus, "--path", checkpoint, *common, "--gen-subset", "valid",
              "--tokens-per-sample", "64", "--max-sentences", "4", "--output-word-probs", real=True)  # fmt: skip
    blocks = re.findall(r"fairseq_cli\.eval_lm(?::| \| )(\d+) (.*\[-?[\d.]+\])$", log, re.MULTILINE)
    assert len(blocks) == len(valid) // 64 + (len(valid) % 64 > 0), log[-3000:]
    for number, words in blocks:
        chars = [word.rsplit(" [", 1)[0] for word in words.split("\t")]
        assert all(len(c) == 1 for c in chars) and "".join(chars) == valid[int(number) * 64 :][: len(chars)]
    # fairseq-eval-lm with a context window is eval-bpc's protocol (windows of 64, 16 scored each).
    log = run(BIN / "fairseq-eval-lm", char_corpus, "--path", checkpoint, *common, "--gen-subset", "valid",
              "--tokens-per-sample", "64", "--context-window", "48", "--max-sentences", "4")  # fmt: skip
    fairseq_bits = float(re.search(r"Loss \(base 2\): ([\d.]+)", log)[1])
    ours = cli("eval-bpc", checkpoint, "--data", char_corpus, "--split", "valid", "--window", "64", "--step", "16")
    assert ours.returncode == 0 and abs(float(re.search(r"BPC ([\d.]+)", ours.stdout)[1]) - fairseq_bits) <= 1e-4
    # fairseq-generate: each block's target (T-) and hypothesis (H-, D-) as text.
    log = run(BIN / "fairseq-generate", char_corpus, "--path", checkpoint, *common, "--gen-subset", "valid",
              "--tokens-per-sample", "64", "--max-sentences", "8", "--beam", "1", "--max-len-b", "8",
              real=True)  # fmt: skip
    targets = dict(line[2:].split("\t", 1) for line in log.splitlines() if line.startswith("T-"))
    assert len(targets) == len(blocks) and all(t == valid[int(k) * 64 :][:64] for k, t in targets.items())
    hypotheses = [line.split("\t")[2] for line in log.splitlines() if line.startswith("D-")]
    assert len(hypotheses) == len(blocks) and not any("0x" in h for h in hypotheses)


def test_fairseq_train_without_the_user_dir_refuses_our_task_as_it_does_for_users(char_corpus, tmp_path):
    """Without ``--user-dir`` fairseq has never heard of the plugin: argparse's one-line
    refusal, nothing trained. (A warm start has the plugin registered and would train.)"""
    result = subprocess.run(command([BIN / "fairseq-train", char_corpus, "--task", "longformer_char_lm", "--arch",
                                     "longformer_lm_small", *ON_CPU, "--save-dir", tmp_path], real=True),
                            capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "invalid choice: 'longformer_char_lm'" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_fairseq_hydra_train_runs_a_recipe_phase(char_corpus, tmp_path):
    """Phase 1 of the character-LM recipe as docs/char-lm.md runs it (``fairseq-hydra-train
    --config-dir recipes/char_lm --config-name small_phase1 task.data=...``), at the demo's
    toy sizes: the recipe loads the plugin, and the checkpoint holds the recipe's settings
    with the overrides (``common.user_dir`` among them)."""
    toy = ToyPhase.of(1)
    overrides = [*TOY_MODEL, *toy.overrides(3), "common.cpu=true", f"task.data={char_corpus}",
                 f"checkpoint.save_dir={tmp_path}"]  # fmt: skip
    log = run(BIN / "fairseq-hydra-train", "--config-dir", ROOT / "recipes" / "char_lm", "--config-name",
              "small_phase1", *overrides, env={**os.environ, "PWD": str(ROOT)}, real=True)  # fmt: skip
    assert "done training" in log, log[-3000:]
    cfg = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["cfg"]
    assert cfg["model"]["_name"] == "longformer_lm" and cfg["task"]["_name"] == "longformer_char_lm"
    assert cfg["model"]["attention_window"] == "{}:{}".format(*toy.windows) and cfg["model"]["decoder_layers"] == 2
    assert cfg["optimization"]["max_update"] == 3 and cfg["common"]["user_dir"] == str(USER_DIR)


def test_prep_writes_the_zips_bytes(tmp_path):
    """``longformer-fs prep text8`` on a zip as the official one is laid out (one member,
    ``text8``): each split is its share of the bytes, in file order, read back through
    fairseq's reader."""
    text = " ".join(np.random.default_rng(3).choice(["anarchism", "originated", "as", "a", "term"], 900))[:4000]
    with zipfile.ZipFile(tmp_path / "text8.zip", "w") as archive:
        archive.writestr("text8", text)
    result = subprocess.run(command([BIN / "longformer-fs", "prep", "text8", "--zip", tmp_path / "text8.zip",
                                     "--out", tmp_path / "text8", "--skip-checksum", "--split-sizes", "3000,500,500"],
                                    real=True), capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train/valid/test = 3,000/500/500 bytes" in result.stdout, result.stdout
    for split, part in (("train", text[:3000]), ("valid", text[3000:3500]), ("test", text[3500:])):
        assert read_char_split(tmp_path / "text8", split).decode() == part


def test_export_hf_writes_hfs_model(longformer_hub, tmp_path):
    """``longformer-fs export-hf`` of an imported Longformer: transformers loads what it
    wrote, and its logits are the original HF model's at a length past both windows."""
    from transformers import LongformerForMaskedLM

    ok("import-hf", longformer_hub, "--out", tmp_path / "ckpt")
    result = subprocess.run(command([BIN / "longformer-fs", "export-hf", tmp_path / "ckpt" / "model.pt", "--out",
                                     tmp_path / "hf"], real=True), capture_output=True, text=True, cwd=ROOT,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0 and "LongformerForMaskedLM" in result.stdout, result.stderr[-3000:]
    original, exported = (LongformerForMaskedLM.from_pretrained(d, local_files_only=True).eval()
                          for d in (longformer_hub, tmp_path / "hf"))  # fmt: skip
    ids = torch.randint(4, original.config.vocab_size - 1, (2, 75), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 0
    glob = torch.zeros_like(ids)
    glob[:, 0] = 1
    with torch.no_grad():
        want, got = (m(input_ids=ids, global_attention_mask=glob).logits for m in (original, exported))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert want.abs().max() > 1


SLOW_BATCHES = ROOT / "tests" / "training" / "slow_batches"  # its sitecustomize slows the batches down
STARTS = {
    # plain fairseq-train --user-dir, one process
    "fairseq-train": lambda: [BIN / "fairseq-train"],
    # two processes under torchrun, through the plugin's launcher
    "launcher": lambda: [BIN / "torchrun", "--nproc_per_node", "2", "--master_port", str(free_port()), "-m",
                         "longformer_fs.launch", "fairseq-train"],
}  # fmt: skip


def slow_batches_run(mode: str, start: str, data: Path, save_dir: Path) -> tuple[int, str]:
    """The tiny char LM started as ``start`` (:data:`STARTS`), stopping after 4
    updates, mid-epoch, while the loader thread is making a batch (``SLOW_BATCHES=mode``),
    with the default thread count, as users run it."""
    cmd = [*STARTS[start](), data, *TINY_CHAR_LM, *CHAR_LM_TRAINING, "--max-update", "4",
           "--batch-size", "4", "--save-dir", save_dir, "--no-epoch-checkpoints", "--disable-validation",
           "--data-buffer-size", "1", *ON_CPU]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(SLOW_BATCHES=mode, PYTHONPATH=os.pathsep.join([str(SLOW_BATCHES), env.get("PYTHONPATH", "")]))
    result = subprocess.run(command(cmd, real=True), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, env=env, timeout=300)  # fmt: skip
    return result.returncode, result.stdout


def test_a_finished_run_exits_0_every_time_and_a_failed_one_does_not(char_corpus, tmp_path):
    """fairseq's loader thread inside a torch call at interpreter exit aborts the process
    after a finished run (SIGABRT, "terminate called without an active exception"): the
    control, plain fairseq-train with the plugin's stop switched off, shows the failure.
    With it, every run exits 0, the launcher's and plain fairseq-train's (the plugin stops
    the loaders at exit in every process that loads it), and one whose rank 1 fails does
    not. Two runs at a time. (One run of each kind: the slow batches make the abort
    deterministic, as the control shows by aborting every time, so a second identical run
    adds no chance to see it. Plain fairseq-train under torchrun, which this test also ran,
    is one plain fairseq-train per process, with the plugin's stop installed as in the
    other runs: three more new interpreters that add no case.)"""
    runs = [
        ("no-stop", "fairseq-train"),
        ("clean", "fairseq-train"),
        ("clean", "launcher"),
        ("fail-rank-1", "launcher"),
    ]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda i: slow_batches_run(*runs[i], char_corpus, tmp_path / str(i)), range(len(runs))))
    (code, log), *clean, (failed_code, failed_log) = results
    assert code != 0 and "terminate called without an active exception" in log, log[-3000:]
    assert "done training" in log  # it had finished
    for (_, start), (code, log) in zip(runs[1:-1], clean, strict=True):
        assert code == 0, (start, log[-3000:])
        assert log.count("done training") >= 1 and "terminate called" not in log, start
    assert failed_code != 0 and "rank 1 fails to load a batch (on purpose)" in failed_log, failed_log[-3000:]
