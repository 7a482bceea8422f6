"""``longformer-fs report``: the whole report at toy size on this CPU, every part ``ok``
(CI's guard that the GPU run, prepared without a GPU, cannot rot), the end-to-end parts'
profiles and the recipes' settings; its runner's caps, failures and budget; its oracle
against the tests' own."""

import json
import os
import signal
import subprocess  # the report as users run it, its parts' processes and signals
import time

import helpers
import pytest
import torch
import yaml
from helpers import BIN, ROOT, cli
from oracle import oracle_layer

from longformer_fs.attention import LongformerSelfAttention, available_backends
from longformer_fs.report import PART_NAMES
from longformer_fs.report.parts import dense_oracle
from longformer_fs.report.runner import Context, Part, PartFailed, run_all

pytestmark = pytest.mark.slow  # the whole report, at toy size


def test_the_toy_report_runs_every_part_on_this_cpu(tmp_path):
    out = tmp_path / "report"
    report = [BIN / "longformer-fs", "report", "--device", "cpu", "--toy", "--out", out, "--budget", "900"]
    result = subprocess.run(helpers.command(report), capture_output=True, text=True, timeout=1200)  # as users run it
    report = json.loads((out / "report.json").read_text())
    not_ok = {name: part.get("error") for name, part in report["parts"].items() if part["status"] != "ok"}
    assert result.returncode == 0 and not not_ok, (not_ok, result.stdout[-3000:], result.stderr[-3000:])
    assert list(report["parts"]) == PART_NAMES
    assert report["machine"]["torch"] == torch.__version__ and report["settings"]["toy"]
    parts = report["parts"]

    # Verification that verified something: every backend here, both dtypes, every case.
    oracle_rows = [row for row in parts["oracle"]["rows"] if "skipped" not in row]
    assert {row["backend"] for row in oracle_rows} == set(available_backends())
    assert {row["dtype"] for row in oracle_rows} == {"float32", "bfloat16"} and len(oracle_rows) >= 24
    assert all(row["passed"] and row["output_error"] <= row["tolerance"] for row in oracle_rows)
    assert parts["check"]["cases"] >= 7 and not parts["check"]["failures"]
    assert parts["cuda_tests"]["counts"].get("skipped", 0) >= 5  # no GPU here: skipped, never passed

    # Speed rows with the band's work: the kernel computes about the band, dense SDPA all T x T.
    rows = {(r["impl"], r["seq_len"], r["dilation"]): r for r in parts["attention"]["rows"]}
    assert 8 * rows[("kernel", 1024, 1)]["work"] < rows[("sdpa", 1024, 1)]["work"]
    assert rows[("kernel", 1024, 4)]["fwd_bwd_ms"] > 0
    split = parts["attention"]["time_split kernel T=1024"]
    assert split and all(row["ms"] > 0 for row in split)
    assert "time_split kernel T=1024:" in (out / "report.md").read_text()
    assert parts["lm"]["speedup"] > 0 and parts["led"]["led"]["peak_gib"] > 0
    assert parts["encoder_128k"]["fits"] and parts["led_train_64k"]["fits"]
    # Packing, for MLM and for fine-tuning: each way trained, packed rows padded the least (at
    # toy size bucketed rows may tie them), far less than fairseq's shuffled fine-tuning batches.
    pack = parts["pack"]
    tables = {"rows": ("packed", "complete_doc", "complete"), "finetune_rows": ("packed", "bucketed", "fairseq")}
    padded = {}
    for table, modes in tables.items():
        assert [row["rows"] for row in pack[table]] == list(modes)
        padded[table] = {row["rows"]: row["padded_share"] for row in pack[table]}
    assert padded["rows"]["packed"] <= padded["rows"]["complete_doc"]
    assert padded["finetune_rows"]["packed"] <= padded["finetune_rows"]["bucketed"]
    assert padded["finetune_rows"]["packed"] < padded["finetune_rows"]["fairseq"] / 2
    assert pack["packed_speed_vs_fairseq"] > 0 and pack["speed_vs_complete_doc"] > 0

    # The end-to-end parts trained as their recipes do (float32 here) and kept a profile of one
    # step of each model: files that hold the kernels, syncs, copies, compiles and memory.
    backends = set(available_backends())
    for name, recipe in (("lm", "char_lm/small_phase1"), ("led", "summarization/led_base_16k"),
                         ("finetune", "finetune/triviaqa")):  # fmt: skip
        model = _recipe_model(recipe)
        training = parts[name]["training"]
        assert training["recipe"] == f"recipes/{recipe}.yaml" and training["precision"] == "fp32", training
        assert (training["dropout"], training["attention_dropout"]) == (model["dropout"], model["attention_dropout"])
        assert training["checkpoint_activations"] == model.get("checkpoint_activations", False)
        profile = json.loads((out / "profiles" / f"{name}.json").read_text())
        table = (out / "profiles" / f"{name}.txt").read_text()
        assert set(profile["models"]) == set(parts[name]["profile"]["models"]) and len(profile["models"]) >= 2
        for model_name, record in profile["models"].items():
            assert f"== {model_name}" in table
            kernels = record["profile"]["kernels"]
            assert 0 < len(kernels) <= 25 and all(k["count"] > 0 and k["ms"] >= 0 for k in kernels)
            assert sum(k["ms"] for k in kernels) <= record["profile"]["kernels_total_ms"] + 0.01
            assert record["peak_gib"] > 0 and record["saved_tensors"]["total_bytes"] > 0
            assert record["saved_tensors"]["layers"] and record["profile"]["h2d_copies"]["count"] == 0
            assert {k.split(" (")[0] for k in record["attention"]["backends"]} <= backends
            assert record["attention"]["kernel"] != "none" or record["attention"]["backends"]
        assert f"(profiles/{name}.json)" in (out / "report.md").read_text()
    ours = profile["models"]["ours"]  # finetune: bounded global tokens, no value read back
    assert ours["profile"]["host_syncs"]["count"] == 0 and ours["attention"]["backends"]
    assert parts["lm"]["longformer_lm_small"]["attention"]["backends"]
    assert parts["lm"]["speedup_vs_causal_sdpa"] > 0 and parts["led"]["led"]["attention"]["backends"]

    # The recipes trained, in float32 here and with their own dropout, and their hubs answered
    # on the device; their logs named the attention backends their training took.
    recipes = {"text8": "char_lm/small_phase1", "mlm_base": "mlm/longformer_base_4096",
               "finetune_triviaqa": "finetune/triviaqa", "summarize_arxiv": "summarization/led_large_16k"}  # fmt: skip
    for name, recipe in recipes.items():
        part, model = parts[name], _recipe_model(recipe)
        assert part["precision"] == "fp32" and part["hub"]["device"] == "cpu", part
        assert (part["dropout"], part["attention_dropout"]) == (model["dropout"], model["attention_dropout"]), name
        chosen = {entry.split(" on ")[0] for entry in part["attention_backends"]}
        assert chosen and chosen <= backends and part["fast_backend"] is None, part
    assert len(parts["text8"]["hub"]["sample"]) == 32 and parts["finetune_triviaqa"]["hub"]["answer"]

    text = (out / "report.md").read_text()
    assert all(f"`{name}`" in text for name in PART_NAMES) and "## Targets" in text
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted(
        [f"{name}.log" for name in ["machine", *PART_NAMES]]
        + [f"{name}.result.json" for name in ["machine", *PART_NAMES]]
        + [f"{name}.partial.json" for name in PART_NAMES if (out / "logs" / f"{name}.partial.json").exists()]
    )


def _recipe_model(name: str) -> dict:
    """``recipes/NAME.yaml``'s model settings as its YAML says, its ``model: PRESET`` under them."""
    path = ROOT / "recipes" / f"{name}.yaml"
    recipe = yaml.safe_load(path.read_text())
    model = {}
    for entry in recipe.get("defaults") or []:
        if isinstance(entry, dict) and "model" in entry:
            model.update(yaml.safe_load((path.parent / "model" / f"{entry['model']}.yaml").read_text()))
    return {**model, **(recipe.get("model") or {})}


# ------------------------------------------------------------------------------- runner


def _context(tmp_path, name):
    return Context("cpu", True, tmp_path, tmp_path / f"{name}.log")


def _raises(ctx):
    ctx.record(before=1)
    raise PartFailed("what it checks does not hold")


def _sleeps(ctx):
    ctx.record(measured=42)
    os.system("sleep 60 &")  # a child it started: killed with it
    time.sleep(60)


def _dies(ctx):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_failing_or_hung_part_is_recorded_and_the_report_goes_on(tmp_path):
    parts = [
        Part("raises", "verify", "", cap_s=30, toy_cap_s=30, least_s=0, run=_raises),
        Part("sleeps", "verify", "", cap_s=1.5, toy_cap_s=1.5, least_s=0, run=_sleeps),
        Part("dies", "verify", "", cap_s=30, toy_cap_s=30, least_s=0, run=_dies),
        Part("fine", "verify", "", cap_s=30, toy_cap_s=30, least_s=0, run=lambda ctx: {"value": 3}),
        Part("late", "verify", "", cap_s=300, toy_cap_s=300, least_s=100, run=lambda ctx: {"value": 4}),
    ]
    seen = []
    start = time.monotonic()
    results = run_all(parts, lambda p: _context(tmp_path, p.name), 60, True, lambda name, _: seen.append(name))
    assert time.monotonic() - start < 20
    assert seen == [p.name for p in parts]
    assert results["raises"]["status"] == "failed" and "does not hold" in results["raises"]["error"]
    assert results["raises"]["before"] == 1  # what it measured before failing is kept
    assert results["sleeps"]["status"] == "failed" and "ran out of time" in results["sleeps"]["error"]
    assert results["sleeps"]["measured"] == 42 and results["sleeps"]["seconds"] < 5
    assert results["dies"]["status"] == "failed" and "SIGKILL" in results["dies"]["error"]
    assert results["fine"] == {"status": "ok", "seconds": results["fine"]["seconds"], "value": 3}
    assert results["late"]["status"] == "skipped" and "budget" in results["late"]["error"]


def test_the_report_names_the_command_for_the_parts_its_budget_left_out():
    from pathlib import Path

    from longformer_fs.report import PARTS
    from longformer_fs.report.document import markdown, rest_command

    left = {"status": "skipped", "seconds": 0, "error": "budget spent: 3 s left of --budget, it needs at least 20 s"}
    results = {"check": {"status": "ok", "seconds": 9.0}, "sample": left, "oracle": {"status": "ok"}, "lm": left}
    settings = {"device": "cuda", "toy": False, "budget": 480, "parts": list(results)}
    payload = {"machine": {}, "settings": settings, "parts": results, "targets": [], "notes": []}
    text = markdown(payload, [part for part in PARTS if part.name in results])
    assert "`longformer-fs report --device cuda --parts sample,lm`" in text
    command = rest_command({**settings, "toy": True}, results, Path("/tmp/report-rest"))
    assert command == "longformer-fs report --device cuda --toy --parts sample,lm --out /tmp/report-rest"
    results["lm"] = results["sample"] = {"status": "failed", "seconds": 60, "error": "ran out of time"}
    assert "--parts" not in markdown(payload, [part for part in PARTS if part.name in results])
    assert rest_command(settings, results) is None


def test_the_report_refuses_bad_input_in_one_line(tmp_path):
    for args, message in (
        (["--parts", "check,nonsense"], "--parts: unknown ['nonsense']"),
        (["--budget", "0"], "--budget"),
    ):
        result = cli("report", "--device", "cpu", "--toy", "--out", str(tmp_path / "r"), *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    if not torch.cuda.is_available():
        result = cli("report", "--out", str(tmp_path / "r"))
        assert result.returncode == 2 and "no CUDA device" in result.stderr


# ------------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("causal", [False, True])
def test_the_reports_dense_oracle_equals_the_tests_naive_one(causal):
    """The report verifies backends against the layer on the dense reference backend in
    float64: it must equal the tests' row-by-row oracle (tests/oracle.py), global and padded
    rows and dilated heads included, whatever backend the layer had, and differ from a layer
    with another window (so it can fail a backend)."""
    torch.manual_seed(0)
    layer = LongformerSelfAttention(32, 4, 3, (1, 2, 1, 3), causal, backend="chunks").double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, dtype=torch.float64) * 0.1)
    x = torch.randn(23, 2, 32, dtype=torch.float64)
    pad = torch.zeros(2, 23, dtype=torch.bool)
    pad[1, 17:] = True
    glob = torch.zeros(2, 23, dtype=torch.bool)
    glob[:, [0, 9]] = True
    expected = oracle_layer(layer, x, pad, glob)
    torch.testing.assert_close(dense_oracle(layer, x, pad, glob), expected, atol=1e-12, rtol=0)
    layer.window = 2
    assert (dense_oracle(layer, x, pad, glob) - expected).abs().max() > 1e-3


def test_the_gpu_targets_read_flash_flops_the_finetune_lengths_and_the_recipes():
    """The targets the toy report cannot reach (no GPU here), on figures as a GPU run records
    them: flash's band FLOP/s against dense SDPA's, counted here from the band's mask."""
    from longformer_fs.attention.band import band_mask
    from longformer_fs.report.document import target_rows
    from longformer_fs.report.parts import attention_ratios

    seq_len, window = 512, 16
    rows = [{"impl": "flash", "seq_len": seq_len, "dilation": 1, "fwd_bwd_ms": 2.0},
            {"impl": "sdpa", "seq_len": seq_len, "dilation": 1, "fwd_bwd_ms": 20.0}]  # fmt: skip
    band = int(band_mask(seq_len, window, 1, False).sum())
    ratio = attention_ratios(rows, window)[str(seq_len)]["flash band FLOP/s / sdpa FLOP/s"]
    assert ratio == pytest.approx((band / 2.0) / (seq_len**2 / 20.0))
    recipe = {"status": "ok", "precision": "bf16", "attention_backends": ["flash on cuda"], "fast_backend": True}
    parts = {
        "attention": {"ratios": {str(seq_len): {"flash band FLOP/s / sdpa FLOP/s": 0.7}}},
        "finetune": {
            "rows": [
                {"seq_len": 4096, "speedup": 1.6, "memory_ratio": 0.5},
                {"seq_len": 16384, "speedup": 2.0, "memory_ratio": 0.5},
            ]
        },  # fmt: skip
        **{name: dict(recipe) for name in ("text8", "mlm_base", "finetune_triviaqa", "summarize_arxiv")},
    }
    parts["text8"].update(attention_backends=["chunks on cuda"], fast_backend=False)
    met = {row["what"]: row["met"] for row in target_rows(parts, toy=False)}
    assert met["`flash` band FLOP/s against dense flash SDPA's, fwd + bwd"] is True
    assert met["fine-tuning against HF at 4K tokens"] is True and met["fine-tuning against HF at 16K tokens"] is False
    assert met["the four recipes at toy size"] is False  # one trained on chunks
    parts["text8"].update(recipe)
    assert {row["what"]: row["met"] for row in target_rows(parts, toy=False)}["the four recipes at toy size"]
