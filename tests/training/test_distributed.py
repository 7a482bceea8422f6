"""Several processes on fairseq's own distributed training, on CPU with gloo.

Two processes under torchrun (through ``longformer_fs.launch``) must end with exactly
the parameters of one process with ``--update-freq 2``: same batches per update, and
the gradient all-reduce of two processes sums the same two gradients. A run with
update_freq 1 is the control: it must differ.
"""

import concurrent.futures
import os
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import BIN, CHAR_LM_TRAINING, ON_CPU, ROOT, TINY_CHAR_LM, command, free_port, run

from longformer_fs.launch import LaunchError, distributed_arguments

ENV = dict(os.environ, OMP_NUM_THREADS="1")  # two processes share the two cores


def train(args, save_dir, processes=1):
    if processes == 1:
        cmd = [BIN / "fairseq-train", *args]
    else:
        cmd = [BIN / "torchrun", "--nproc_per_node", str(processes), "--master_port", str(free_port()),
               "-m", "longformer_fs.launch", "fairseq-train", *args]  # fmt: skip
    cmd += ["--save-dir", save_dir, "--no-epoch-checkpoints", "--disable-validation", *ON_CPU]
    log = run(*cmd, "--log-format", "simple", "--seed", "3", env=ENV, timeout=600)
    return torch.load(Path(save_dir) / "checkpoint_last.pt", weights_only=False)["model"], log


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


LM = [*TINY_CHAR_LM, *CHAR_LM_TRAINING, "--max-update", "6", "--batch-size", "4", "--required-batch-size-multiple", "1"]
LM += ["--clip-norm", "0.25"]


def test_two_processes_equal_one_with_twice_the_batch_char_lm(char_corpus, tmp_path):
    two, log = train([char_corpus, *LM], tmp_path / "two", processes=2)
    assert "distributed init (rank 1): env://" in log and "ddp_backend': 'legacy_ddp'" in log
    one, _ = train([char_corpus, *LM, "--update-freq", "2"], tmp_path / "one")
    control, _ = train([char_corpus, *LM], tmp_path / "control")
    assert max_difference(two, one) < 1e-6
    assert max_difference(two, control) > 1e-3


MLM = [
    "--user-dir",
    ROOT / "longformer_fs",
    "--task",
    "masked_lm",
    "--criterion",
    "masked_lm",
    "--arch",
    "longformer_roberta_base",
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--attention-window",
    "8",
    "--max-positions",
    "64",
    "--tokens-per-sample",
    "64",
    "--sample-break-mode",
    "none",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--dropout",
    "0",
    "--attention-dropout",
    "0",
    "--max-update",
    "4",
    "--batch-size",
    "4",
    "--required-batch-size-multiple",
    "1",
    "--weight-decay",
    "0.01",
]


@pytest.mark.parametrize("global_tokens", [None, "<s>"], ids=["no-global", "global-bos"])
def test_two_processes_equal_one_with_twice_the_batch_roberta(runs_corpus, tmp_path, global_tokens):
    extra = [] if global_tokens is None else ["--global-attention-tokens", global_tokens]
    two, log = train([runs_corpus, *MLM, *extra], tmp_path / "two", processes=2)
    one, _ = train([runs_corpus, *MLM, *extra, "--update-freq", "2"], tmp_path / "one")
    assert max_difference(two, one) < 1e-6
    globals_ = [k for k in two if "_proj_global" in k]
    locals_ = [k.replace("_proj_global", "_proj") for k in globals_]
    assert len(globals_) == 12
    moved = max(float((two[g] - two[loc]).abs().max()) for g, loc in zip(globals_, locals_, strict=True))
    if global_tokens is None:  # unused and frozen: still the copies of the initial local projections
        assert "global projections frozen" in log
        initial_copy = [float((two[g] - two[loc]).abs().max()) for g, loc in zip(globals_, locals_, strict=True)]
        assert moved > 0 and all(d > 0 for d in initial_copy)  # the local ones trained away from them
    else:  # trained: they moved
        assert "global projections frozen" not in log and moved > 0


def ddp_steps(globals_: str, touch: str) -> subprocess.CompletedProcess:
    cmd = [
        BIN / "torchrun",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        ROOT / "tests" / "training" / "ddp_no_global_tokens.py",
        globals_,
        touch,
    ]
    # torchrun and its workers start warm (helpers.command; the script is one of tests/'): DDP's
    # own start-up is the workers' and the checks are on the steps, not on how a process exits
    # (test_a_finished_run_exits_0... starts new interpreters for that).
    return subprocess.run(command(cmd), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)


@pytest.mark.parametrize("globals_", ["trainable", "frozen"])
def test_pytorch_ddp_without_find_unused_parameters(globals_):
    result = ddp_steps(globals_, "touch")
    assert result.returncode == 0 and result.stdout.count("two steps done") == 2, result.stderr[-3000:]


def test_pytorch_ddp_control_fails_without_the_touch():
    """Without the zero-cost use of the global projections, DDP stops: the check can fail."""
    result = ddp_steps("trainable", "no-touch")
    assert result.returncode != 0 and "two steps done" not in result.stdout
    assert any(m in result.stderr for m in ("finished reduction", "not used", "did not receive grad")), result.stderr[
        -3000:
    ]


def test_launch_arguments():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    args = distributed_arguments("fairseq-train", ["data", "--cpu"], env)
    assert args == [
        "--distributed-rank",
        "3",
        "--distributed-world-size",
        "8",
        "--distributed-init-method",
        "env://",
        "--distributed-no-spawn",
        "--distributed-backend",
        "gloo",
        "--device-id",
        "0",
        "--ddp-backend",
        "legacy_ddp",
    ]
    assert "--ddp-backend" not in distributed_arguments("fairseq-train", ["--cpu", "--ddp-backend", "x"], env)
    hydra = distributed_arguments("fairseq-hydra-train", ["common.cpu=true"], env)
    assert "distributed_training.distributed_rank=3" in hydra and "distributed_training.ddp_backend=legacy_ddp" in hydra
    assert distributed_arguments("fairseq-train", ["data"], {}) == []  # outside torchrun: one process as it is
    with pytest.raises(LaunchError, match="torchrun"):
        distributed_arguments("fairseq-train", [], {"RANK": "0"})


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
    result = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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


def test_fsdp_finds_fairscale():
    """fairseq's --ddp-backend fully_sharded wraps fairscale's FSDP (pinned); it computes
    on CUDA only (docs/gpus.md, "Many GPUs and nodes")."""
    from fairseq.distributed import fully_sharded_data_parallel as fsdp

    assert fsdp.has_FSDP
