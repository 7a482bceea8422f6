"""``longformer-fs report``: what longformer-fs does on this machine, in one run.

Fourteen parts in five groups (verify; attention speed; end to end against the peers; the
longest document; the recipes on the device), cheapest first, each in a process of its own
under its own time cap, all within --budget. A part that fails or runs out of time is
recorded with its error, and the report goes on. OUT/report.md is for people; OUT/report.json,
{"machine": {...}, "parts": {NAME: {"status": "ok" | "failed" | "skipped", "seconds": ...,
...figures}}, "targets": [...]}, for programs; each part's log is in OUT/logs/. The end-to-end
parts lm, led and finetune keep a profile of one step of each model in OUT/profiles/PART.json
and PART.txt: its top kernels, host syncs, host-to-device copies, compiles, peak memory and
the bytes each layer saves for the backward.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pkgutil
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from unittest import mock

from tqdm import tqdm

from .. import checkout
from . import parts, recipe_runs
from .document import not_rehearsed, rest_command, write_report
from .runner import Context, Part, run_all, run_part

# Why a rehearsal skips the recipes: they train through make, in processes the rehearsal's
# device does not reach. tests/training/test_rehearsal.py rehearses each recipe's steps instead.
RECIPE_PROCESSES = "the recipe trains through make, in processes of its own (its steps are rehearsed by the tests)"
# Cheapest first, by what each took on an NVIDIA H200 (a5ab877; lm and the recipes, which
# the first GPU run did not reach, by estimate), so that a short budget still brings back
# the most. Most of each GPU part is torch.compile's time, not the measurement's; the
# end-to-end parts' caps leave room for compiling our models' layers (issue 61, unmeasured).
PARTS = [
    Part("check", "verify", "`longformer-fs check --no-timing`: the compiled kernels against float64",
         cap_s=60, toy_cap_s=120, least_s=10, run=parts.check),
    Part("sample", "end to end", "`bench sample`: writing after 8K and 32K characters",
         cap_s=60, toy_cap_s=60, least_s=15, run=parts.sample),
    Part("encoder_128k", "longest document", "LED-base's encoder reading 128K tokens, inference",
         cap_s=60, toy_cap_s=60, least_s=15, run=parts.encoder_128k),
    Part("finetune", "end to end", "`bench finetune`: a QA training step against HF's at 4K and 16K tokens, as the "
         "TriviaQA recipe trains; a profile of the 16K step", cap_s=150, toy_cap_s=90, least_s=20, run=parts.finetune),
    Part("led", "end to end", "`bench led`: an LED training step against BART's at 16K source tokens, as the LED "
         "recipe trains; a profile of each step", cap_s=150, toy_cap_s=90, least_s=20, run=parts.led),
    Part("led_train_64k", "longest document", "one LED-base training step at 64K source tokens, bf16, the LED "
         "recipe's dropout, activation checkpointing", cap_s=150, toy_cap_s=60, least_s=20, run=parts.led_train_64k),
    Part("cuda_tests", "verify", "the tests CI skips without a GPU (`pytest -m gpu`)",
         cap_s=90, toy_cap_s=90, least_s=10, run=parts.cuda_tests,
         not_rehearsed="pytest runs in a process of its own, and the tests need a GPU"),
    Part("oracle", "verify", "every backend's layer against the float64 dense oracle, forward and backward, in "
         "float32 and bf16: dilated, causal, global and padded", cap_s=150, toy_cap_s=90, least_s=10, run=parts.oracle),
    Part("attention", "attention speed", "forward + backward at 4K, 16K, 64K: kernel, flex, dense SDPA, "
         "FlexAttention alone; d = 4 against d = 1; where flex's GPU time goes",
         cap_s=240, toy_cap_s=90, least_s=40, run=parts.attention),
    Part("lm", "end to end", "`bench lm`: longformer_lm_small against transformer_lm (as fairseq runs it, and "
         "with causal SDPA) at 16K characters, as the char-LM recipe trains; a profile of each step",
         cap_s=240, toy_cap_s=60, least_s=20, run=parts.lm),
    Part("pack", "end to end", "`bench pack`: continued MLM on long-tailed documents, packed rows against "
         "complete_doc and complete, as the MLM recipe trains; classification fine-tuning, packed rows against "
         "fairseq's batches and bucketed ones", cap_s=150, toy_cap_s=90, least_s=30, run=parts.pack,
         not_rehearsed="its six trainings outrun the rehearsal's cap on meta (the packed layer's GPU step is "
         "rehearsed by tests/attention/test_packed.py)"),
    Part("text8", "recipes", "`make text8-phase1` at toy size, then the character LM's hub on the device",
         cap_s=90, toy_cap_s=90, least_s=30, run=recipe_runs.text8, not_rehearsed=RECIPE_PROCESSES),
    Part("finetune_triviaqa", "recipes", "`make finetune-triviaqa` at toy size, then the QA hub on the device",
         cap_s=120, toy_cap_s=120, least_s=30, run=recipe_runs.finetune_triviaqa, not_rehearsed=RECIPE_PROCESSES),
    Part("mlm_base", "recipes", "`make mlm-base` at toy size from a RoBERTa release, then `fill_mask` on the device",
         cap_s=120, toy_cap_s=120, least_s=30, run=recipe_runs.mlm_base, not_rehearsed=RECIPE_PROCESSES),
    Part("summarize_arxiv", "recipes", "`make summarize-arxiv` at toy size from a BART release, then the LED hub "
         "on the device",
         cap_s=150, toy_cap_s=150, least_s=40, run=recipe_runs.summarize_arxiv, not_rehearsed=RECIPE_PROCESSES),
]  # fmt: skip
PART_NAMES = [part.name for part in PARTS]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[1].replace("\n", " ")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where every part runs")
    parser.add_argument(
        "--out", type=Path, default=Path("report"), help="directory for report.md, report.json, logs/, profiles/"
    )
    parser.add_argument("--budget", type=float, default=480, help="seconds for all the parts together")
    parser.add_argument(
        "--toy", action="store_true", help="shrink every size so that the whole report runs on a CPU in minutes"
    )
    parser.add_argument("--parts", default="all", help=f"comma-separated parts to run, of: {', '.join(PART_NAMES)}")
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="rehearse the GPU run on this machine: every part on the meta device, taking each decision an sm90 "
        "GPU takes, without timing or numbers (longformer_fs.devices). What would raise on the GPU raises "
        "here; the parts that run in processes of their own (the recipes, pytest) are skipped",
    )


def machine(device: str) -> dict:
    """The machine and the versions that the figures depend on (run in a child: CUDA)."""
    import torch

    from .. import devices
    from ..attention.backends import flash, kernel

    info = {
        "python": platform.python_version(),
        "cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "longformer_fs": _version("longformer-fs"),
        "commit": _commit(),
        "extension": kernel.build_id() if kernel.unavailable_reason() is None else kernel.unavailable_reason(),
        # What this torch ships of FlashAttention's window and variable lengths (the flash backend's ops).
        "flash_window": flash.unavailable_reason() or "aten::_flash_attention_forward takes window_size_left/right",
        "torch_attention_modules": sorted(
            m.name for m in pkgutil.iter_modules(torch.nn.attention.__path__) if not m.name.startswith("_r")
        ),
    }
    for name in ("triton", "fairseq-fixed", "transformers"):
        info[name.split("-")[0]] = _version(name)
    if devices.on_gpu(device) and devices.cuda_runtime():
        info["gpu"] = devices.gpu_name(device)
        info["gpu_memory_gib"] = round(devices.gpu_memory_bytes(device) / 2**30, 1)
        info["extension_has_cuda"] = kernel.has_cuda() if kernel.unavailable_reason() is None else False
    return info


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _commit() -> str | None:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout.ROOT, capture_output=True, text=True)
    return result.stdout.strip() or None


def _selected(text: str) -> list[Part]:
    names = PART_NAMES if text == "all" else [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in PART_NAMES]
    if unknown or not names:
        raise ValueError(f"--parts: unknown {unknown or 'none given'}; choose from {', '.join(PART_NAMES)}")
    return [part for part in PARTS if part.name in names]


def main(args: argparse.Namespace) -> int:
    # Every part is forked from this process, and a CUDA runtime initialised before a fork
    # is unusable after it: CUDA is asked about through NVML here (torch's fork-safe check).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    from .. import devices

    if getattr(args, "rehearse", False):
        # The parts are forked inside the rehearsal, and take it along; what `check` records
        # goes to a scratch cache, never beside a real GPU's records.
        with devices.rehearsal(), tempfile.TemporaryDirectory(prefix="longformer-fs-rehearsal-") as cache:
            with mock.patch.dict(os.environ, {"LONGFORMER_FS_CACHE": cache}):
                return _run(args, "meta", rehearsing=True)
    if args.device == "cuda" and not devices.cuda_runtime():
        raise ValueError("--device cuda: no CUDA device is visible here (use --device cpu, with --toy for a CPU)")
    return _run(args, args.device)


def _run(args: argparse.Namespace, device: str, rehearsing: bool = False) -> int:
    from .. import devices

    chosen = _selected(args.parts)
    if args.budget <= 0:
        raise ValueError(f"--budget: expected a positive number of seconds, got {args.budget:g}")
    # Imported once here, so that no part pays for them (each is forked from this process).
    import fairseq  # noqa: F401
    import transformers  # noqa: F401

    from .. import components  # noqa: F401  (registers the plugin's models and tasks)

    if devices.initialised():  # a defect of ours: no part could use the GPU
        raise RuntimeError("CUDA was initialised before the parts were forked")

    start = time.monotonic()
    out = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    settings = {
        "device": device,
        "toy": args.toy,
        "budget": args.budget,
        "parts": [p.name for p in chosen],
        "rehearsal": rehearsing,
    }
    with tempfile.TemporaryDirectory(prefix="longformer-fs-report-") as work:

        def context(name: str) -> Context:
            return Context(device, args.toy, Path(work), logs / f"{name}.log", profiles=out / "profiles")

        describe = Part(
            "machine", "verify", "this machine", cap_s=60, toy_cap_s=60, least_s=0, run=lambda ctx: machine(device)
        )
        found = run_part(describe, context("machine"), 60)
        info = {k: v for k, v in found.items() if k not in ("status", "seconds")}
        bar = tqdm(total=len(chosen), desc="report", unit="part")

        def finished(name: str, results: dict) -> None:
            result = results[name]
            bar.update(1)
            bar.write(f"{name:<18} {result['status']:<8} {result['seconds']:>6.0f} s  {result.get('error', '')}"[:160])
            write_report(out, info, settings, chosen, results)  # after every part: a cut-off run keeps the rest

        left = args.budget - (time.monotonic() - start)
        results = run_all(chosen, lambda part: context(part.name), left, args.toy, finished, rehearsing)
        bar.close()
    md_path, json_path = write_report(out, info, settings, chosen, results)
    skipped = not_rehearsed(results)
    failed = [name for name, r in results.items() if r["status"] != "ok" and name not in skipped]
    ran = len(results) - len(skipped)
    print(f"wrote {md_path} and {json_path} ({time.monotonic() - start:.0f} s); {ran - len(failed)} of "
          f"{ran} parts ok" + (f"; not ok: {', '.join(failed)}" if failed else "")
          + (f"; not rehearsed: {', '.join(skipped)}" if skipped else ""))  # fmt: skip
    rest = rest_command(settings, results, out.with_name(out.name + "-rest"))
    if rest:
        print(f"the parts the budget left out: {rest}")
    return 0 if not failed else 1
