"""The report's measurements that need no trained model: verify, attention speed, end to end
against the peers, and the longest document. Each takes sizes for a GPU, or with ``--toy``
for a CPU, and records its figures as it goes (a part stopped by its cap keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from .. import checkout, devices
from ..attention import LongformerSelfAttention, available_backends
from ..attention.backends import BACKENDS
from ..attention.spec import BandSpec
from ..benchmarks import attention as bench_attention
from ..benchmarks import finetune as bench_finetune
from ..benchmarks import led as bench_led
from ..benchmarks import lm as bench_lm
from ..benchmarks import pack as bench_pack
from ..benchmarks import sample as bench_sample
from ..benchmarks.recipe_training import Training, recipe_training
from ..benchmarks.step_profile import profile_table
from .runner import Context, PartFailed

GIB = 2**30


# ``--toy``'s character LMs (lm, sample): the first and the last of longformer_lm_small's
# 12 layers (the narrowest window, and the widest with dilated heads), a sixth of the work.
TOY_LM_LAYERS = 2


def _pick(ctx: Context, full, toy):
    return toy if ctx.toy else full


def _precision(ctx: Context) -> str:
    """bf16 on a GPU, as the targets are stated; float32 on a CPU (its bf16 paths are not the point)."""
    return "bf16" if devices.on_gpu(ctx.device) else "fp32"


def command_output(argv: list[str]) -> tuple[int, str]:
    """``longformer-fs ARGV`` run in this process, as a user runs it: exit status and stdout."""
    from ..cli import main

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = main(argv)
    print(captured.getvalue())
    return status, captured.getvalue()


def _release(device: str) -> None:
    devices.release_cached_memory(device)


# ------------------------------------------------------------------------------- verify


def check(ctx: Context) -> dict:
    """``longformer-fs check``: the compiled kernels against float64 on this device.

    Without its timing of the backends: that compiles FlexAttention once per dtype and
    kind of call, over 150 s on an H200, and the ``attention`` part measures the backends.
    """
    argv = ["check", "--device", ctx.device, "--no-timing", "--json"]
    status, text = command_output(argv)
    report = json.loads(text)
    results = report["results"]
    failures = [f"{r['case']} {r['dtype']}" + (f" ({r['error']})" if r.get("error") else "") for r in results
                if not r["passed"]]  # fmt: skip
    # A rehearsal compares nothing (its tensors hold no values): no errors to rank.
    worst = max((max(r["errors"].values()) / r["tolerance"] for r in results if r["errors"]), default=None)
    ctx.record(
        cases=len(results),
        failures=failures,
        worst_error_over_tolerance=worst,
        timings_ms=report.get("timings_ms") or {},
        build=report["build"],
    )
    if status != 0 or failures:
        raise PartFailed(f"{len(failures)} of {len(results)} cases over tolerance: {', '.join(failures[:4])}")
    return {}


_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def cuda_tests(ctx: Context) -> dict:
    """The tests marked ``gpu`` (CI has no GPU and skips them), run by pytest here."""
    tests = checkout.path("tests", "the GPU tests")
    files = sorted(str(p) for p in tests.rglob("test_*.py") if "mark.gpu" in p.read_text())
    if not files:
        raise PartFailed(f"no test marked gpu under {tests}")
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-o", "addopts=-ra",
               *files]  # fmt: skip
    # Cold starts: the suite's warm-start server (tests/conftest.py) would import torch,
    # fairseq and transformers once more for tests that start no command.
    env = {**os.environ, "LFS_COLD_STARTS": "1"}
    result = subprocess.run(command, cwd=checkout.ROOT, capture_output=True, text=True, env=env)
    print(result.stdout[-20000:], result.stderr[-5000:])
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr.strip()[-300:]
    counts = {name.rstrip("s"): int(n) for n, name in _COUNTS.findall(summary)}
    failed = [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    ctx.record(summary=summary, counts=counts, failed=failed)
    if result.returncode != 0 or counts.get("failed") or counts.get("error"):
        raise PartFailed(f"pytest -m gpu: {summary}")
    if not devices.runs_kernels(ctx.device) and counts.get("passed"):
        raise PartFailed("GPU tests passed without a GPU: their skip condition is broken")
    return {}


def dense_oracle(layer: LongformerSelfAttention, x: torch.Tensor, pad: torch.Tensor, glob: torch.Tensor):
    """The layer's output in float64 on the dense ``reference`` backend (all T x T, masked
    to the band), with its own weights; ``x``: ``(T, B, C)``. The tests hold this to their
    independent, row-by-row oracle (tests/oracle.py), global and padded rows and dilated
    heads included: a backend is verified against it without a third oracle."""
    twin = copy.deepcopy(layer).double()
    twin.backend = "reference"
    return twin(x.double(), pad, glob)


# The oracle's cases: (name, per-head dilations, causal, padded and global tokens).
ORACLE_CASES = (
    ("band", (1, 1, 1, 1), False, False),
    ("dilated", (1, 2, 3, 4), False, False),
    ("causal", (1, 1, 1, 1), True, False),
    ("causal dilated", (1, 2, 1, 4), True, False),
    ("global + padded", (1, 1, 1, 1), False, True),
    ("global + padded + dilated", (1, 2, 3, 4), False, True),
)
# Error over the largest reference value (outputs, and gradients of the input).
ORACLE_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def oracle(ctx: Context) -> dict:
    """Every backend's layer against the float64 dense oracle, forward and backward, in float32 and bf16."""
    device = torch.device(ctx.device)
    seq_len, window, head_dim = _pick(ctx, (1100, 64, 64), (67, 5, 16))
    heads, batch = 4, 2
    rows, failures = [], []
    for backend in available_backends():
        for dtype_name, tolerance in ORACLE_TOLERANCE.items():
            dtype = getattr(torch, dtype_name)
            for case, dilations, causal, masked in ORACLE_CASES:
                row = {"backend": backend, "dtype": dtype_name, "case": case, "tolerance": tolerance}
                spec = BandSpec(window, dilations, causal, head_dim**-0.5)
                limits = BACKENDS[backend].limits(spec, device, head_dim, dtype)
                if limits:
                    rows.append({**row, "skipped": "; ".join(limits)})
                    continue
                gen = torch.Generator().manual_seed(len(rows))
                layer = LongformerSelfAttention(heads * head_dim, heads, window, dilations, causal, backend=backend)
                with torch.no_grad():
                    for p in layer.parameters():
                        p.add_(torch.randn(p.shape, generator=gen) * 0.05)
                x = torch.randn(seq_len, batch, heads * head_dim, generator=gen)
                pad = torch.zeros(batch, seq_len, dtype=torch.bool)
                glob = torch.zeros(batch, seq_len, dtype=torch.bool)
                if masked:
                    pad[1, seq_len - seq_len // 3 :] = True
                    glob[:, [0, 5, seq_len // 2]] = True
                    glob[1, 1] = True
                weight = torch.randn(seq_len, batch, heads * head_dim, generator=gen)
                layer = layer.to(device, dtype)
                x, pad, glob, weight = x.to(device), pad.to(device), glob.to(device), weight.to(device)
                # FlexAttention has no CPU backward (the backend says so): there, forward only.
                backward = not (backend == "flex" and device.type == "cpu")
                mine = x.to(dtype).detach().clone().requires_grad_(backward)
                layer.requires_grad_(backward)
                out = layer(mine, pad if masked else None, glob if masked else None)
                if devices.rehearsing(device):  # the call and its backward run; no values to compare
                    if backward:
                        (out.float() * weight).sum().backward()
                    rows.append({**row, "rehearsed": True})
                    ctx.record(seq_len=seq_len, window=window, rows=rows, failures=failures)
                    continue
                exact = x.to(dtype).detach().double().requires_grad_()
                expected = dense_oracle(layer, exact, pad, glob)
                row["output_error"] = _relative_error(out, expected)
                if backward:
                    (out.float() * weight).sum().backward()
                    (expected * weight.double()).sum().backward()
                    row["grad_error"] = _relative_error(mine.grad, exact.grad)
                row["passed"] = max(row["output_error"], row.get("grad_error", 0.0)) <= tolerance
                rows.append(row)
                if not row["passed"]:
                    failures.append(f"{backend} {dtype_name} {case}")
                ctx.record(seq_len=seq_len, window=window, rows=rows, failures=failures)
    if failures:
        raise PartFailed(f"{len(failures)} backend cases over tolerance: {', '.join(failures[:4])}")
    return {}


def _relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value.double() - reference).abs().max() / reference.abs().max().clamp_min(1e-30))


# ------------------------------------------------------------------------ attention speed


def attention(ctx: Context) -> dict:
    """Forward + backward of every implementation at three lengths, d = 1 and d = 4."""
    lengths = _pick(ctx, (4096, 16384, 65536), (256, 1024))
    args = argparse.Namespace(
        device=ctx.device,
        batch=1,
        heads=_pick(ctx, 12, 2),
        head_dim=_pick(ctx, 64, 16),
        dtype=_pick(ctx, "bfloat16", "float32") if devices.on_gpu(ctx.device) else "float32",
        repeat=_pick(ctx, 5, 1),
        dense_max_len=max(lengths),
    )
    window = _pick(ctx, 256, 16)
    threads = torch.get_num_threads()
    # Compiled FlexAttention is a GPU path (on a CPU it has no backward, and compiling takes
    # minutes); so is FlashAttention (on a CPU the flash backend is a dense stand-in).
    flexible = ("flash", "flex", "flexattention") if devices.on_gpu(ctx.device) else ()
    plans = [(1, ("kernel", *flexible, "sdpa")), (4, ("kernel", *flexible))]
    rows = []
    for dilation, impls in plans:
        for seq_len in lengths:
            case = bench_attention.Case(seq_len, window, dilation, False, threads)
            for impl in impls:
                if impl not in available_backends() + list(bench_attention.PEERS):
                    continue
                result = bench_attention.measure(impl, "report", case, args)
                rows.append({"impl": impl, "seq_len": seq_len, "dilation": dilation, **_attention_row(result)})
                ctx.record(window=window, heads=args.heads, head_dim=args.head_dim, dtype=args.dtype, rows=rows)
                _release(ctx.device)
    # Where the time goes at the longest length: the GPU targets hold flex to FlexAttention
    # alone, and flex-static tells compiling once for every length from the band kernel.
    case = bench_attention.Case(max(lengths), window, 1, False, threads)
    for impl in ("flex", "flex-static", "flexattention") if devices.on_gpu(ctx.device) else ("kernel",):
        split = bench_attention.time_split(impl, case, args)
        ctx.record(**{f"time_split {impl} T={case.seq_len}": split})
        _release(ctx.device)
    return {"ratios": attention_ratios(rows, window)}


def _attention_row(result) -> dict:
    keep = ("fwd_ms", "fwd_bwd_ms", "peak_mib", "work", "skipped", "notes")
    return {k: getattr(result, k) for k in keep if getattr(result, k) not in (None, [])}


def attention_ratios(rows: list[dict], window: int) -> dict:
    """``{T: {name: ratio}}`` of forward + backward times: flash, flex and the kernel over
    FlexAttention alone, d = 4 over d = 1, and flash's band FLOP/s over dense SDPA's (the
    band's query-key pairs a second against all ``T x T`` a second; bidirectional, d = 1)."""

    def time_of(impl, seq_len, dilation):
        row = next((r for r in rows if (r["impl"], r["seq_len"], r["dilation"]) == (impl, seq_len, dilation)), None)
        return row.get("fwd_bwd_ms") if row else None

    ratios = {}
    for seq_len in sorted({r["seq_len"] for r in rows}):
        pairs = {
            "flash / flexattention": (("flash", 1), ("flexattention", 1)),
            "flex / flexattention": (("flex", 1), ("flexattention", 1)),
            "kernel / flexattention": (("kernel", 1), ("flexattention", 1)),
            "flash d=4 / d=1": (("flash", 4), ("flash", 1)),
            "flex d=4 / d=1": (("flex", 4), ("flex", 1)),
            "kernel d=4 / d=1": (("kernel", 4), ("kernel", 1)),
            "sdpa / kernel": (("sdpa", 1), ("kernel", 1)),
        }
        found = {}
        for name, ((a, da), (b, db)) in pairs.items():
            top, bottom = time_of(a, seq_len, da), time_of(b, seq_len, db)
            if top and bottom:
                found[name] = top / bottom
        flash, sdpa = time_of("flash", seq_len, 1), time_of("sdpa", seq_len, 1)
        if flash and sdpa:
            band = bench_attention.band_pairs(seq_len, window, 1, False)
            found["flash band FLOP/s / sdpa FLOP/s"] = (band / flash) / (seq_len * seq_len / sdpa)
        ratios[str(seq_len)] = found
    return ratios


# ---------------------------------------------------------------------------- end to end


def _training(ctx: Context, recipe: Path) -> Training:
    """How the end-to-end parts train: as ``recipe`` does, in the precision it runs in here
    (the recipe's on CUDA, float32 on a CPU), our models' layers compiled on CUDA (eager on
    a CPU; the peers always eager)."""
    training = recipe_training(recipe, ctx.device)
    ctx.record(training=training.figures())
    return training


# What a model's result keeps in report.json; its profile goes to OUT/profiles/PART.json.
_PROFILED = ("profile", "saved_tensors")


def _figures_of(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in _PROFILED}


def keep_profiles(ctx: Context, part: str, results: dict[str, dict], **settings) -> None:
    """Keep the profile of one step of each model in ``results`` (name -> a bench's result):
    ``OUT/profiles/PART.json`` (every figure) and ``PART.txt`` (tables for people), and a
    summary of each in the part's figures (``profile``), which report.md shows."""
    kept = {name: result for name, result in results.items() if "error" not in result and "profile" in result}
    files = {}
    if ctx.profiles is not None and kept:
        ctx.profiles.mkdir(parents=True, exist_ok=True)
        record = {"part": part, "device": ctx.device, "toy": ctx.toy, **settings, "models": kept}
        (ctx.profiles / f"{part}.json").write_text(json.dumps(record, indent=1, default=str))
        (ctx.profiles / f"{part}.txt").write_text("\n".join(profile_table(name, r) for name, r in kept.items()))
        files = {"json": f"profiles/{part}.json", "text": f"profiles/{part}.txt"}
    ctx.record(profile={"files": files, "models": {name: profile_summary(r) for name, r in kept.items()}})


def profile_summary(result: dict) -> dict:
    """A model's profile in a few figures: the attention it ran, syncs, copies, compiles,
    peak memory, the largest layer's saved tensors and the top kernel."""
    profile = result["profile"]
    dynamo = profile["dynamo"]["in_step"]
    saved = result.get("saved_tensors") or {}
    layers = saved.get("layers") or []
    top = profile["kernels"][0] if profile["kernels"] else None
    return {
        "band_attention": result["attention"]["backends"],
        "sdpa_kernel": result["attention"]["kernel"],
        "host_syncs": profile["host_syncs"]["count"],
        "h2d_copies": profile["h2d_copies"]["count"],
        "compiles": dynamo["compiles"],
        "recompiles": dynamo["recompiles"],
        "graph_breaks": dynamo["graph_breaks"],
        "peak_gib": result["peak_gib"],
        "largest_layer_saved_mib": max(row["bytes"] for row in layers) / 2**20 if layers else None,
        "top_kernel": f"{top['name'][:80]} ({top['ms']:.3g} ms x{top['count']})" if top else None,
    }


def lm(ctx: Context) -> dict:
    """``bench lm`` at 16K characters: longformer_lm_small against transformer_lm, as fairseq
    runs it and with causal SDPA, all trained as the phase-1 recipe trains."""
    seq_len, repeat, layers = _pick(ctx, (16384, 3, None), (256, 1, TOY_LM_LAYERS))
    training = _training(ctx, bench_lm.recipe(1))
    torch.manual_seed(0)
    ours, windows = bench_lm.longformer_small(1, training.checkpoint_activations, layers, training.dropout,
                                              training.attention_dropout, training.compile_layers)  # fmt: skip
    ctx.record(seq_len=seq_len, precision=training.precision, windows=windows, layers=len(ours.blocks))
    results = {"longformer_lm_small": bench_lm.measure(ours, seq_len, repeat, ctx.device, training.precision, True)}
    ctx.record(longformer_lm_small=_figures_of(results["longformer_lm_small"]))
    # Kept after each model: a part stopped by its cap keeps the profiles it took.
    keep_profiles(ctx, "lm", results, seq_len=seq_len, training=training.figures())
    sizes = bench_lm.peer_sizes(ours, 1)
    del ours
    _release(ctx.device)
    for name in bench_lm.PEERS:
        peer = bench_lm.peer(name, seq_len, sizes, training.dropout, training.attention_dropout,
                             training.checkpoint_activations)  # fmt: skip
        results[name] = bench_lm.measure(peer, seq_len, repeat, ctx.device, training.precision, True)
        del peer
        _release(ctx.device)
        ctx.record(**{name: _figures_of(results[name])})
        keep_profiles(ctx, "lm", results, seq_len=seq_len, training=training.figures())
    _raise_errors(**results)
    mine = results["longformer_lm_small"]["chars_per_s"]
    return {
        "speedup": mine / results["transformer_lm"]["chars_per_s"],
        "speedup_vs_causal_sdpa": mine / results["transformer_lm_causal_sdpa"]["chars_per_s"],
    }


def _raise_errors(**results) -> None:
    errors = {name: r["error"] for name, r in results.items() if "error" in r}
    if errors:
        raise PartFailed("; ".join(f"{name}: {error}" for name, error in errors.items()))


def finetune(ctx: Context) -> dict:
    """``bench finetune`` at 4K and 16K tokens: our QA training step against HF's, trained as
    the TriviaQA recipe trains; the profile is the longest length's."""
    lengths = _pick(ctx, (4096, 16384), (256,))
    global_tokens, window, layers, repeat = _pick(ctx, (64, 256, None, 3), (8, 16, 1, 1))
    training = _training(ctx, bench_finetune.RECIPE)
    rows = []
    for seq_len in lengths:
        row, results = {"seq_len": seq_len}, {}
        for kind in bench_finetune.KINDS:
            results[kind] = bench_finetune.step_measurement(
                kind, seq_len, global_tokens, window, layers, 1, ctx.device, training.precision, repeat,
                training.dropout, training.attention_dropout, training.checkpoint_activations,
                saved_tensors=seq_len == lengths[-1], compile_layers=training.compile_layers,
            )  # fmt: skip
            row[kind] = _figures_of(results[kind])
            _release(ctx.device)
        row["speedup"] = row["hf"]["step_s"] / row["ours"]["step_s"]
        row["memory_ratio"] = row["ours"]["peak_gib"] / row["hf"]["peak_gib"]
        rows.append(row)
        ctx.record(rows=rows, precision=training.precision, window=window, global_tokens=global_tokens)
        if seq_len == lengths[-1]:
            keep_profiles(ctx, "finetune", results, seq_len=seq_len, training=training.figures())
    return {}


def led(ctx: Context) -> dict:
    """``bench led`` at 16K source tokens: LED against BART, with peak memory, trained as the
    LED-base recipe trains (its precision, dropout and activation checkpointing)."""
    source, target, window, layers, width, repeat = _pick(
        ctx, (16384, 512, 512, None, None, 2), (512, 32, 32, 1, 64, 1)
    )
    training = _training(ctx, bench_led.RECIPE)
    row = {"source_len": source, "target_len": target, "window": window, "precision": training.precision}
    results = {}
    for kind in ("led", "bart"):
        results[kind] = bench_led.step_measurement(
            kind, source, target, window, layers, width, repeat, ctx.device, training.precision,
            training.checkpoint_activations, training.dropout, training.attention_dropout, saved_tensors=True,
            compile_layers=training.compile_layers,
        )  # fmt: skip
        row[kind] = _figures_of(results[kind])
        _release(ctx.device)
        ctx.record(**row)
        keep_profiles(ctx, "led", results, source_len=source, target_len=target, training=training.figures())
    return {
        "speedup": row["bart"]["step_s"] / row["led"]["step_s"],
        "memory_ratio": row["led"]["peak_gib"] / row["bart"]["peak_gib"],
    }


def pack(ctx: Context) -> dict:
    """``bench pack``: continued MLM on long-tailed documents, packed rows against
    ``complete_doc`` and ``complete``, trained as the MLM recipe trains, then classification
    fine-tuning, packed rows against fairseq's shuffled batches and bucketed ones, as the
    classification recipes train; side by side."""
    seq_len, window, batch, documents, median, tokens, layers, width = _pick(
        ctx, (4096, 256, 8, 400, 600, 262144, 12, 768), (256, 16, 4, 40, 60, 2048, 1, 64)
    )
    settings = {"seq_len": seq_len, "window": window, "batch_size": batch, "median": median, "tokens": tokens}

    def mlm_corpus() -> Path:
        bench_pack.corpus(ctx.work / "pack", documents, max(4, documents // 10), median, 1.0, seq_len)
        return ctx.work / "pack"

    def classification_corpus() -> Path:
        bench_pack.classification_corpus(ctx.work / "pack_finetune", documents, median, 1.0, seq_len - 1)
        return ctx.work / "pack_finetune"

    found, rows, tuned = {}, [], []
    for measure, recipe, modes, table, corpus in (
        (bench_pack.train_measurement, bench_pack.RECIPE, bench_pack.MODES, rows, mlm_corpus),
        (bench_pack.finetune_measurement, bench_pack.FINETUNE_RECIPE, bench_pack.FINETUNE_MODES, tuned,
         classification_corpus),
    ):  # fmt: skip
        training, data = _training(ctx, recipe), corpus()
        for mode in modes:
            result = measure(
                mode, str(data), seq_len, window, batch, tokens, layers, width, ctx.device, training.precision,
                training.dropout, training.attention_dropout, training.checkpoint_activations,
                training.compile_layers,
            )  # fmt: skip
            table.append({"rows": mode, **result})
            _release(ctx.device)
            ctx.record(rows=rows, finetune_rows=tuned, **settings)
    found.update(bench_pack.ratios({row["rows"]: row for row in rows}))
    found.update(bench_pack.finetune_ratios({row["rows"]: row for row in tuned}))
    return found


def sample(ctx: Context) -> dict:
    """``bench sample`` at 8K and 32K characters of context."""
    contexts, steps, repeat, layers = _pick(ctx, ((8192, 32768), 8, 3, None), ((128, 512), 4, 1, TOY_LM_LAYERS))
    rows = []
    torch.manual_seed(0)
    ours, _ = bench_lm.longformer_small(1, checkpoint=False, layers=layers)
    ours = ours.to(ctx.device).eval()
    ctx.record(layers=len(ours.blocks))
    for context in contexts:
        rows.append(bench_sample.measure_context(ours, context, steps, repeat, ctx.device, phase=1))
        ctx.record(rows=rows, steps=steps)
        _release(ctx.device)
    return {}


# ---------------------------------------------------------------------- longest document


def _fits(run) -> dict:
    """``run()``'s figures, or whether it ran out of memory (a result, not a failure)."""
    try:
        return {"fits": True, **run()}
    except torch.OutOfMemoryError as err:
        return {"fits": False, "error": str(err).splitlines()[0][:200]}


def _device_memory(ctx: Context) -> dict:
    total = devices.gpu_memory_bytes(ctx.device)
    return {} if total is None else {"device_gib": total / GIB}


def led_train_64k(ctx: Context) -> dict:
    """One LED-base training step at 64K source tokens, bf16, the LED recipe's dropouts,
    activation checkpointing, its layers compiled on CUDA (as ``bench led`` trains it)."""
    source, target, layers, width = _pick(ctx, (65536, 512, None, None), (2048, 32, 1, 64))
    precision = _precision(ctx)
    training = recipe_training(bench_led.RECIPE, ctx.device)
    figures = _fits(
        lambda: _figures_of(
            bench_led.step_measurement(
                "led", source, target, 512 if not ctx.toy else 32, layers, width, 1, ctx.device, precision,
                checkpoint_activations=True, dropout=training.dropout, attention_dropout=training.attention_dropout,
                compile_layers=training.compile_layers,
            )
        )
    )  # fmt: skip
    return {"source_len": source, "target_len": target, "precision": precision, "dropout": training.dropout,
            "attention_dropout": training.attention_dropout, "compile_layers": training.compile_layers, **figures,
            **_device_memory(ctx)}  # fmt: skip


def encoder_128k(ctx: Context) -> dict:
    """LED-base's encoder reading 128K tokens, inference."""
    source, layers, width = _pick(ctx, (131072, None, None), (4096, 1, 64))
    window = _pick(ctx, 512, 32)
    precision = _precision(ctx)

    def read():
        return bench_led.encoder_measurement(source, window, layers, width, ctx.device, precision)

    return {"source_len": source, "precision": precision, **_fits(read), **_device_memory(ctx)}
