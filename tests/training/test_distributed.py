"""Several processes on fairseq's own distributed training, on CPU with gloo.

Two processes under torchrun (through ``longformer_fs.launch``) must end with exactly
the parameters of one process with ``--update-freq 2``: same batches per update, and
the gradient all-reduce of two processes sums the same two gradients. A run with
update_freq 1 is the control: it must differ.
"""

import os
import subprocess  # torchrun's ranks are processes
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


def test_fsdp_finds_fairscale():
    """fairseq's --ddp-backend fully_sharded wraps fairscale's FSDP (pinned); it computes
    on CUDA only (docs/gpus.md, "Many GPUs and nodes")."""
    from fairseq.distributed import fully_sharded_data_parallel as fsdp

    assert fsdp.has_FSDP
