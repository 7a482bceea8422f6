"""``longformer-fs demo`` (``make demo``): the 5-phase character-LM recipe at toy scale.

No download: the corpus is generated (:mod:`data_prep.demo_corpus`), documents whose
later part repeats a passage 48 characters back. The real recipes
(``recipes/char_lm/small_phase1..5``) run through ``fairseq-hydra-train`` with sizes
scaled down on the command line: sequences 32 -> 512 characters, windows and learning
rate doubling and halving per phase as in the paper, each phase starting from the last.
Every phase is then scored with the overlapping-window protocol (scaled: windows of
512, step 64) and the table shows BPC falling once sequences outgrow the 48-character
period.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from tqdm import tqdm

from data_prep.demo_corpus import prepare_demo

from .. import devices
from ..evaluation.char_lm import score_checkpoint
from ..recipes import RECIPES, char_lm_dir, phase_settings

TOY_MODEL = [
    "model.decoder_layers=2",
    "model.decoder_embed_dim=64",
    "model.decoder_ffn_embed_dim=128",
    "model.decoder_attention_heads=4",
    "model.attention_dilation='1,2'",
    "model.dropout=0.0",
]
# Phase 1 at toy scale; later phases follow the recipes' ratios from here.
TOY_SEQ, TOY_WINDOWS, TOY_LR, TOY_BATCH_DIVISOR = 32, (4, 64), 3e-3, 2


@dataclass(frozen=True)
class ToyPhase:
    """A recipe phase scaled down: the recipes' growth of windows (and sequences, which
    grow with them), their learning-rate and batch ratios; smaller numbers."""

    phase: int
    seq: int
    windows: tuple[int, int]
    lr: float
    batch_size: int

    @classmethod
    def of(cls, phase: int) -> "ToyPhase":
        first, recipe = phase_settings("small", 1), phase_settings("small", phase)
        growth = recipe.windows[0] // first.windows[0]
        return cls(
            phase,
            TOY_SEQ * growth,
            (TOY_WINDOWS[0] * growth, TOY_WINDOWS[1] * growth),
            TOY_LR * recipe.lr / first.lr,
            recipe.batch_size // TOY_BATCH_DIVISOR,
        )

    def overrides(self, updates: int) -> list[str]:
        return TOY_MODEL + [
            f"task.tokens_per_sample={self.seq}",
            f"model.attention_window={self.windows[0]}:{self.windows[1]}",
            f"optimization.lr=[{self.lr}]",
            f"optimization.max_update={updates}",
            f"lr_scheduler.warmup_updates={max(1, updates // 10)}",
            f"dataset.batch_size={self.batch_size}",
            "dataset.num_workers=0",
            "dataset.validate_interval_updates=20",
            f"checkpoint.save_interval_updates={updates}",
            "common.log_interval=20",
        ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="data, checkpoints, logs, plot")
    parser.add_argument("--updates", default="200,150,120,100,60", help="updates per phase")
    parser.add_argument("--eval-window", type=int, default=512, help="protocol window (paper: 32256)")
    parser.add_argument("--eval-step", type=int, default=64, help="protocol step (paper: 512)")
    parser.add_argument("--fresh", action="store_true", help="delete --out first instead of resuming")


def run_phase(toy: ToyPhase, updates: int, data: Path, ckpt: Path, log: Path) -> list[dict]:
    """One recipe phase as its own fairseq-hydra-train process; returns its validation logs."""
    phase = toy.phase
    cmd = [
        str(Path(sys.executable).parent / "fairseq-hydra-train"),
        "--config-dir",
        str(char_lm_dir()),
        "--config-name",
        f"small_phase{phase}",
        f"task.data={data}",
        f"checkpoint.save_dir={ckpt / f'phase{phase}'}",
    ]
    if phase > 1:
        cmd.append(f"checkpoint.finetune_from_model={ckpt / f'phase{phase - 1}' / 'checkpoint_last.pt'}")
    if not devices.cuda_runtime():
        cmd.append("common.cpu=true")
    cmd += toy.overrides(updates)
    root = RECIPES.parent
    env = dict(os.environ, PWD=str(root))  # the recipes find the plugin through ${oc.env:PWD}
    with open(log, "w") as f:
        result = subprocess.run(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise RuntimeError(f"phase {phase} failed; see {log}")
    valid = []
    for line in log.read_text().splitlines():
        if "][valid][INFO] - " in line:
            valid.append(json.loads(line.split("][valid][INFO] - ", 1)[1]))
    return valid


def evaluate(checkpoint: Path, data: Path, window: int, step: int) -> dict:
    result, _ = score_checkpoint(checkpoint, data, "test", window, step, batch_size=16, device="cpu")
    return {"test_bpc": result.bpc, "scored": result.scored}


def plot(history: list[dict], path: Path) -> None:
    fig = Figure(figsize=(8, 4))
    ax = fig.subplots()
    offset = 0
    for entry in history:
        xs = [offset + int(v["valid_num_updates"]) for v in entry["valid"]]
        ax.plot(
            xs,
            [float(v["valid_bpc"]) for v in entry["valid"]],
            marker="o",
            markersize=3,
            label=f"phase {entry['phase']} (seq {entry['seq']})",
        )
        offset += entry["updates"]
        ax.axvline(offset, color="grey", alpha=0.3)
    ax.set_xlabel("update (all phases)")
    ax.set_ylabel("validation BPC")
    ax.set_title("Demo: 5-phase character LM; longer phases see the 48-character repeats")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args: argparse.Namespace) -> int:
    updates = [int(x) for x in args.updates.split(",")]
    if len(updates) != 5 or min(updates) < 1:
        raise ValueError(f"--updates: expected 5 positive counts, got {args.updates!r}")
    phases = [ToyPhase.of(phase) for phase in range(1, 6)]  # also checks that the recipes are there
    if args.fresh and args.out.exists():
        shutil.rmtree(args.out)
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    data = out / "data"
    prepare_demo(data)

    history = []
    start = time.perf_counter()
    for toy, n_updates in tqdm(list(zip(phases, updates, strict=True)), desc="demo phases", unit="phase"):
        t0 = time.perf_counter()
        phase = toy.phase
        valid = run_phase(toy, n_updates, data, out / "checkpoints", out / "logs" / f"phase{phase}.log")
        scores = evaluate(
            out / "checkpoints" / f"phase{phase}" / "checkpoint_last.pt", data, args.eval_window, args.eval_step
        )
        history.append(
            {
                "phase": phase,
                "seq": toy.seq,
                "updates": n_updates,
                "windows": f"{toy.windows[0]}-{toy.windows[1]}",
                "lr": toy.lr,
                "valid": valid,
                "valid_bpc": float(valid[-1]["valid_bpc"]) if valid else None,
                "seconds": time.perf_counter() - t0,
                **scores,
            }
        )

    print(
        f"\nDemo corpus: documents repeating a 48-character passage 4 times (4.75 bits for a fresh "
        f"character; 0 for a repeat seen in context). Test scored with windows of {args.eval_window}, "
        f"step {args.eval_step}."
    )
    print(
        f"{'phase':>5} {'seq':>5} {'windows':>9} {'lr':>9} {'updates':>7} {'valid BPC':>9} "
        f"{'test BPC':>8} {'scored':>7} {'time s':>6}"
    )
    for h in history:
        print(
            f"{h['phase']:>5} {h['seq']:>5} {h['windows']:>9} {h['lr']:>9.2e} {h['updates']:>7} "
            f"{h['valid_bpc']:>9.3f} {h['test_bpc']:>8.3f} {h['scored']:>7} {h['seconds']:>6.0f}"
        )
    plot(history, out / "demo.png")
    (out / "demo.json").write_text(json.dumps(history, indent=2))
    print(f"\nwrote {out / 'demo.png'} and {out / 'demo.json'} ({time.perf_counter() - start:.0f} s)")
    return 0
