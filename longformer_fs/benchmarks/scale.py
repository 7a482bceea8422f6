"""``longformer-fs bench scale``: training steps per second with 1 and 2 processes.

Real ``fairseq-train`` runs of ``longformer_lm_small`` (phase-1 windows of the recipe,
one sequence per process and step) on a generated character corpus: one process, then
two under ``torchrun`` through ``longformer_fs.launch`` (gloo on CPU, NCCL on GPUs),
side by side in one run. The cores are split between the processes (``OMP_NUM_THREADS``),
so on one machine two processes show what data parallelism costs and gains, not more
compute. Steps per second come from fairseq's own ``ups`` over the timed updates (the
first updates, with start-up and warm-up, are left out).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data_prep.char_corpus import write_dataset

from .. import checkout, devices
from ..recipes import phase_settings
from . import int_list as _int_list
from . import write_results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=_int_list, default=[1, 2], help="process counts to compare")
    parser.add_argument("--seq-len", type=int, default=4096, help="characters per sequence")
    parser.add_argument("--updates", type=int, default=4, help="timed updates per run")
    parser.add_argument("--warmup", type=int, default=1, help="updates left out of the timing")
    parser.add_argument("--layers", type=int, default=None, help="override the model depth (default: the recipe's)")
    parser.add_argument("--width", type=int, default=None, help="override the model width (and 4x for the FFN)")
    parser.add_argument("--out", type=Path, default=Path("bench_out/scale"),
                        help="work and results directory (fairseq's log of each run in OUT/logs/)")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_corpus(out: Path, seq_len: int, sequences: int) -> Path:
    """Random text8-like characters, enough for ``sequences`` training sequences."""
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", np.uint8)
    train = seq_len * sequences
    data = rng.choice(alphabet, train + 2 * seq_len)
    write_dataset(data, out, (train, seq_len, seq_len), "bench-scale", {"seq_len": seq_len, "sequences": sequences})
    return out


def train_command(data: Path, save: Path, args, processes: int) -> list[str]:
    recipe = phase_settings("small", 1)
    model = recipe.model
    layers = args.layers or model["decoder_layers"]
    width = args.width or model["decoder_embed_dim"]
    train = [
        str(data), "--user-dir", str(checkout.ROOT / "longformer_fs"), "--task", "longformer_char_lm",
        "--arch", "longformer_lm_small", "--criterion", "bpc_cross_entropy",
        "--decoder-layers", str(layers), "--decoder-embed-dim", str(width),
        "--decoder-ffn-embed-dim", str(4 * width), "--decoder-attention-heads", str(model["decoder_attention_heads"]),
        "--attention-window", recipe.attention_window, "--attention-dilation", model["attention_dilation"]
        if layers == model["decoder_layers"] else "1", "--dilated-heads", str(model["dilated_heads"]),
        "--tokens-per-sample", str(args.seq_len), "--batch-size", "1", "--required-batch-size-multiple", "1",
        "--optimizer", "adam", "--lr", "1e-4", "--max-update", str(args.warmup + args.updates),
        "--dropout", "0.0", "--disable-validation", "--no-save", "--num-workers", "0",
        "--log-format", "json", "--log-interval", "1", "--save-dir", str(save),
    ]  # fmt: skip
    if not devices.cuda_runtime():
        train.append("--cpu")
    if processes == 1:
        return [str(Path(sys.executable).parent / "fairseq-train"), *train]
    return [
        str(Path(sys.executable).parent / "torchrun"),
        "--nproc_per_node",
        str(processes),
        "--master_port",
        str(_free_port()),
        "-m",
        "longformer_fs.launch",
        "fairseq-train",
        *train,
    ]


def log_path(out: Path, processes: int) -> Path:
    """Where the run of ``processes`` keeps fairseq's log (every rank's lines)."""
    return out / "logs" / f"processes-{processes}.log"


def run(processes: int, data: Path, args) -> dict:
    """One run's figures from fairseq's own log: updates per second (``ups``, the median
    over the timed updates) and sequences per update (``bsz``, which fairseq sums over the
    ranks)."""
    threads = max(1, (os.cpu_count() or 1) // processes)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = train_command(data, args.out / f"save-{processes}", args, processes)
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=checkout.ROOT, env=env)
    log = log_path(args.out, processes)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        return {"processes": processes, "error": (result.stderr or result.stdout).strip().splitlines()[-1][:200]}
    logs = [
        json.loads(line.split("| train_inner | ", 1)[1])
        for line in (result.stdout + result.stderr).splitlines()
        if "| train_inner | " in line
    ]
    timed = [entry for entry in logs if int(entry["num_updates"]) > args.warmup]
    if not timed:
        return {"processes": processes, "error": "no timed updates in fairseq's log"}
    steps = statistics.median(float(entry["ups"]) for entry in timed)
    sequences = statistics.median(float(entry["bsz"]) for entry in timed)
    return {
        "processes": processes,
        "threads_each": threads,
        "steps_per_s": steps,
        "sequences_per_step": sequences,
        "sequences_per_s": steps * sequences,
        "chars_per_s": steps * sequences * args.seq_len,
    }


def main(args: argparse.Namespace) -> int:
    if min(args.processes) < 1 or args.updates < 1 or args.warmup < 0:
        raise ValueError("--processes, --updates must be >= 1 and --warmup >= 0")
    args.out.mkdir(parents=True, exist_ok=True)
    needed = max(args.processes) * (args.updates + args.warmup + 1)
    data = make_corpus(args.out / "data", args.seq_len, needed)
    rows = [run(n, data, args) for n in tqdm(args.processes, desc="bench scale", unit="run")]
    device = devices.gpu_name("cuda:0") if devices.cuda_runtime() else f"CPU, {os.cpu_count()} cores"
    layers = args.layers or phase_settings("small", 1).model["decoder_layers"]
    print(
        f"longformer_lm_small ({layers} layers), {args.seq_len} characters per sequence, one sequence per "
        f"process and step, {args.updates} timed updates; {device}"
    )
    print(f"{'processes':>9} {'threads each':>12} {'steps/s':>8} {'sequences/s':>11} {'chars/s':>9} {'speedup':>8}")
    base = next((r for r in rows if "error" not in r), None)
    for r in rows:
        if "error" in r:
            print(f"{r['processes']:>9}  error: {r['error']}")
            continue
        speedup = r["sequences_per_s"] / base["sequences_per_s"]
        print(
            f"{r['processes']:>9} {r['threads_each']:>12} {r['steps_per_s']:>8.3f} {r['sequences_per_s']:>11.3f} "
            f"{r['chars_per_s']:>9.0f} {speedup:>8.2f}"
        )
    write_results(args.out, {"seq_len": args.seq_len, "device": device, "runs": rows})
    return 0
