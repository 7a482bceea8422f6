"""The longformer-fs command line."""

import argparse
import json
import os
import subprocess  # the console script, fresh interpreters' imports, an environment's threads
import sys
from pathlib import Path

import pytest
import torch
from helpers import BIN, cli, fairseq_json_logs, ok, run

from longformer_fs.cli import COMMANDS, main


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "longformer_fs.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_info_reports_versions_and_backends():
    result = cli("info")
    assert result.returncode == 0, result.stderr
    assert "torch" in result.stdout and "fairseq" in result.stdout
    assert "chunks" in result.stdout and "reference" in result.stdout
    report = json.loads(cli("info", "--json").stdout)
    import torch

    assert report["versions"]["torch"] == torch.__version__
    assert report["attention_backends"]["chunks"]["available"] is True
    assert report["auto"]["cpu/plain"]["backend"] in ("kernel", "chunks")
    assert "auto chooses" in result.stdout and "apex:" in result.stdout
    # flash on a CPU is its stand-in, the CUDA op's contract: the listing says so.
    flash = report["attention_backends"]["flash"]
    if flash["available"]:
        assert flash["note"].startswith("on CPU: its stand-in, the CUDA op's contract in dense PyTorch")
        assert f"({flash['note']})" in result.stdout
    assert report["attention_backends"]["chunks"]["note"] is None


def test_info_reads_what_check_recorded_without_the_plugin(tmp_path, monkeypatch):
    """The core alone reads no records: a new ``longformer-fs info`` installs them before it
    asks auto (its choices come before anything loads fairseq, whose loading would install
    them too). On the rehearsed GPU, auto takes the fastest backend recorded there."""
    from longformer_fs.attention.backends import kernel
    from longformer_fs.devices import RehearsedGpu
    from longformer_fs.verification import records

    monkeypatch.setenv("LONGFORMER_FS_CACHE", str(tmp_path))
    timings = {"bfloat16": {"plain": {"chunks": 1.0, "flash": 2.0}}}
    record = {"passed": False, "failures": [{}], "cases": 1, "when": "2026-01-01T00:00:00", "timings": timings}
    key = records.record_key(RehearsedGpu().name, kernel.build_id())
    (tmp_path / records.RECORDS).write_text(json.dumps({key: record}))
    result = run_cli("info", "--rehearse", "--json")
    assert result.returncode == 0, result.stderr
    choice = json.loads(result.stdout)["auto"]["cuda/plain/bfloat16"]
    assert choice["backend"] == "chunks", choice
    assert "fastest that `longformer-fs check` measured here (bfloat16, plain: chunks 1.00 ms" in choice["reason"]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_info_reports_the_threads_its_environment_asks_for(threads):
    """As a new interpreter's torch reads OMP_NUM_THREADS, so does the command's process in
    the suite's warm starts (whose server imported torch under another environment): with
    each fork keeping the server's count, this failed at 1, and the suite's trainings ran
    a thread a core beside each other (1,027 s against about 800 s)."""
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    report = json.loads(run(BIN / "longformer-fs", "info", "--json", env=env))
    assert report["hardware"]["cpu_threads"] == int(threads)


def test_console_script_is_installed():
    exe = BIN / "longformer-fs"  # the venv's own: sys.executable's directory is the warm view's shims
    if not exe.exists():
        pytest.skip("package not installed into this interpreter's environment")
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "info" in result.stdout and "bench" in result.stdout


# Prints the heavy libraries and the subcommand modules loaded in this process.
LOADED = (
    "import sys\n"
    "heavy = [m for m in ('transformers', 'matplotlib', 'fairseq', 'torch') if m in sys.modules]\n"
    "commands = [m for m in sys.modules if m.startswith(('longformer_fs.commands.', 'longformer_fs.benchmarks.'))]\n"
    "print(' '.join(sorted(heavy)), '|', ' '.join(sorted(commands)))\n"
)


def loaded_after(*args):
    """(heavy libraries, subcommand modules) loaded by ``longformer-fs ARGS`` in a fresh interpreter."""
    code = (
        f"from longformer_fs.cli import main\ntry:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n" + LOADED
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    heavy, commands = result.stdout.splitlines()[-1].split("|")
    return set(heavy.split()), set(commands.split())


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"], ["prep", "--help"]])
def test_help_imports_no_subcommand_and_neither_torch_nor_fairseq(args):
    assert loaded_after(*args) == (set(), set())


def test_a_closed_pipe_ends_a_command_quietly(capsys, monkeypatch):
    """``longformer-fs info | head -0``: the reader has gone before the command writes, as
    ``| head`` leaves a long output. Python ignores SIGPIPE, so the write raises
    BrokenPipeError: the command ends with status 1, no traceback, and what is left to
    flush at exit goes nowhere rather than into another error."""
    import os

    read, write = os.pipe()
    os.close(read)
    with open(write, "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main(["info"]) == 1
        monkeypatch.undo()
        stdout.write("left over\n")  # the interpreter's last flush
    assert capsys.readouterr().err == ""


def test_info_imports_only_its_module_and_neither_transformers_nor_matplotlib():
    heavy, commands = loaded_after("info")
    assert not heavy & {"transformers", "matplotlib"}
    assert commands == {"longformer_fs.commands.info"}


def test_a_subcommand_help_imports_that_subcommand_only(capsys):
    _, loaded = loaded_after("bench", "attention", "--help")
    assert loaded & {module for module, _ in COMMANDS.values()} == {"longformer_fs.benchmarks.attention"}
    with pytest.raises(SystemExit):
        main(["bench", "attention", "--help"])
    assert "--seq-lens" in capsys.readouterr().out  # its module's arguments, with their defaults


def test_help_lists_every_command_with_its_help():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    for name, (_, help_text) in COMMANDS.items():
        assert name.split()[0] in result.stdout
        if " " not in name:
            assert " ".join(help_text.split()[:3]) in " ".join(result.stdout.split()), name
    bench = " ".join(run_cli("bench", "--help").stdout.split())
    for name, (_, help_text) in COMMANDS.items():
        if name.startswith("bench "):
            assert name.split()[1] in bench and " ".join(help_text.split()[:3]) in bench, name


def test_config_from_args_fills_fields_from_flags_and_refuses_a_field_without_one():
    import argparse
    from dataclasses import dataclass

    from longformer_fs.commands.options import config_from_args

    @dataclass(frozen=True)
    class Config:
        files: dict
        max_tokens: int
        evidence: tuple = ()

    args = argparse.Namespace(train=Path("t.json"), valid=None, test=Path("x.json"), max_tokens=7, evidence=["e"])
    assert config_from_args(Config, args, evidence=("e",)) == Config(
        {"train": Path("t.json"), "test": Path("x.json")}, 7, ("e",)
    )
    del args.max_tokens
    with pytest.raises(TypeError, match=r"Config.max_tokens: no --max-tokens flag"):
        config_from_args(Config, args)


def test_bench_attention_writes_table_json_and_plot(tmp_path, capsys):
    from longformer_fs.attention import available_backends

    impls = ["chunks", "reference", "sdpa", "sdpa-band"] + (["kernel"] if "kernel" in available_backends() else [])
    code = main(
        [
            "bench",
            "attention",
            "--seq-lens",
            "64,96",
            "--target-len",
            "64",
            "--window",
            "4",
            "--heads",
            "2",
            "--head-dim",
            "8",
            "--repeat",
            "1",
            "--threads",
            "1",
            "--impls",
            ",".join(impls),
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "[scaling]" in out and "[variants]" in out and "fwd+bwd ms" in out
    data = json.loads((tmp_path / "results.json").read_text())
    scaling = {(r["impl"], r["seq_len"]) for r in data["results"] if r["part"] == "scaling"}
    assert scaling == {(i, n) for i in impls for n in (64, 96)}
    for r in data["results"]:
        assert r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 and r["peak_mib"] > 0
    variants = {r["variant"] for r in data["results"] if r["part"] == "variants"}
    assert variants == {"bidir d=1", "causal d=1", "bidir d=2", "bidir d=3"}
    assert "targets" not in data and "MISS" not in out  # targets live in docs/benchmarks.md, not in user output
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_band_pairs_counts_the_band():
    from longformer_fs.attention.band import band_mask
    from longformer_fs.benchmarks.attention import band_pairs

    for seq_len, window, dilation, causal in [(10, 2, 1, False), (17, 3, 2, True), (9, 20, 3, False), (1, 0, 1, True)]:
        assert band_pairs(seq_len, window, dilation, causal) == int(band_mask(seq_len, window, dilation, causal).sum())


def test_an_implementation_out_of_memory_leaves_a_row_saying_so(monkeypatch):
    """On a GPU, dense peers run out of memory at long T: that row says so and the bench
    goes on, where the whole command used to end in a traceback."""
    from longformer_fs.benchmarks import attention as bench

    def exhausted():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 192.00 GiB.")

    monkeypatch.setattr(bench, "make_call", lambda *args: exhausted)
    args = argparse.Namespace(device="cpu", batch=1, heads=2, head_dim=8, dtype="float32", repeat=1,
                              dense_max_len=1024)  # fmt: skip
    result = bench.measure("chunks", "scaling", bench.Case(64, 4, 1, False, 1), args)
    assert result.skipped.startswith("OutOfMemoryError: CUDA out of memory") and result.fwd_bwd_ms is None


def test_time_split_names_where_a_step_spends_its_time(monkeypatch):
    """Rows are operators' own times per step, each the median over the profiled steps: a
    mean over 3 steps once put a paused aten::empty (12.5 ms over 3 steps of about 2 ms)
    above twice the whole step's median while the other worker ran. Here the first profiled
    step pauses for 0.3 s inside an operator of its own, which a median leaves out."""
    import time

    from longformer_fs.benchmarks import attention as bench

    made = bench.make_call
    paused = []

    def pausing_call(*args):
        call = made(*args)

        def paused_once():
            if torch.autograd._profiler_enabled() and not paused:
                with torch.profiler.record_function("pause"):
                    time.sleep(0.3)
                paused.append(True)
            return call()

        return paused_once

    monkeypatch.setattr(bench, "make_call", pausing_call)

    args = argparse.Namespace(device="cpu", batch=1, heads=2, head_dim=8, dtype="float32")
    # Enough rows to hold the matrix products whatever the ranking: on a busy machine the
    # toy step's small operators trade places (a top 4 once held none of them).
    whole, *split = bench.time_split("chunks", bench.Case(256, 8, 1, False, 1), args, top=16)
    assert whole["name"] == "(whole step)" and whole["ms"] > 0
    # Against the same run's whole step, with room for the profiler's own cost and another
    # process on the cores: a row over it is no part of a step (0.3 s would be 100x).
    assert 8 <= len(split) <= 16 and all(0 < row["ms"] <= 10 * whole["ms"] and row["calls"] >= 1 for row in split)
    assert [row["ms"] for row in split] == sorted((row["ms"] for row in split), reverse=True)
    assert any("bmm" in row["name"] or "matmul" in row["name"] or "einsum" in row["name"] for row in split), split
    assert paused and "pause" not in [row["name"] for row in split]


def test_static_flex_computes_the_band():
    """``flex-static`` (the flex backend's computation compiled per shape; on CPU, how
    ``flex`` is timed) computes the band: compiled with dynamo's eager backend here, the
    dilated case included, against the float64 oracle."""
    from oracle import oracle_attention

    from longformer_fs.benchmarks import attention as bench

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 8, generator=gen) for _ in range(3))
    for dilation in (1, 3):
        with torch.no_grad():
            out = bench.static_flex(bench.Case(37, 4, dilation, False, 1), q, k, v, compiler="eager")()
        want = oracle_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), 4, (dilation,) * 2, False)
        torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)


def test_bench_rejects_unknown_implementation(tmp_path, capsys):
    assert main(["bench", "attention", "--impls", "flashy", "--out", str(tmp_path)]) == 2
    assert "--impls" in capsys.readouterr().err


def own_step_seconds(argv: list[str], tmp_path: Path, seq_len: int) -> float:
    """A training step of the model fairseq-train builds from ``argv`` (the character task's
    arguments), timed here, apart from any bench: the median of 3 after one, batch 1."""
    import time

    from model_steps import build, write_dictionary

    from longformer_fs.conventions import byte_symbol

    tmp_path.mkdir(parents=True, exist_ok=True)
    write_dictionary(tmp_path / "dict.txt", [byte_symbol(b) for b in range(256)])
    _, model, _ = build([str(tmp_path), "--task", "longformer_char_lm", "--tokens-per-sample", str(seq_len), *argv])
    tokens = torch.randint(4, 200, (1, seq_len))
    seconds = []
    for _ in range(4):
        start = time.perf_counter()
        logits = model(tokens)[0]
        torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tokens.view(-1)).backward()
        seconds.append(time.perf_counter() - start)
    return sorted(seconds[1:])[1]


def test_bench_lm_times_each_models_step_and_the_phase5_step(tmp_path):
    """In this process: both models are measured in it, and the phase-5 step in
    run_isolated's child. The bench's characters per second are checked against steps
    timed here, apart from it, of the models fairseq-train builds from the recipe's
    phase-1 settings (fairseq's own ``transformer_lm`` for the peer): within 4x each
    (measured: 0.87x and 1.15x; within 3x failed once, with the other xdist worker
    compiling beside it), a bound tight enough to catch a bench that times the wrong thing
    (the set-up with the step, a rate per millisecond)."""
    from longformer_fs.recipes import phase_settings

    seq_len = 64
    printed = ok("bench", "lm", "--seq-lens", str(seq_len), "--repeat", "3", "--phase5-len", "96",
                 "--out", tmp_path / "bench")  # fmt: skip
    data = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert data["phase5"]["seq_len"] == 96 and data["phase5"]["step_s"] > 0
    assert "speedup" in printed
    row = data["rows"][0]
    recipe = phase_settings("small", 1)
    sizes = [f"--{key.replace('_', '-')}={recipe.model[key]}" for key in
             ("decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads")]  # fmt: skip
    archs = {
        "longformer_lm_small": ["--arch", "longformer_lm_small", "--attention-window", recipe.attention_window,
                                "--attention-dilation", recipe.model["attention_dilation"], "--dilated-heads",
                                str(recipe.model["dilated_heads"])],
        "transformer_lm": ["--arch", "transformer_lm", "--decoder-normalize-before",
                           "--share-decoder-input-output-embed"],
    }  # fmt: skip
    for name, argv in archs.items():
        own = seq_len / own_step_seconds([*argv, *sizes], tmp_path / name, seq_len)
        assert own / 4 <= row[name]["chars_per_s"] <= own * 4, (name, row[name]["chars_per_s"], own)
        assert row[name]["peak_gib"] > 0


def test_bench_sample_times_the_three_ways_of_writing(tmp_path, capsys):
    code = main(["bench", "sample", "--contexts", "16,40", "--steps", "2", "--repeat", "1", "--out", str(tmp_path)])
    assert code == 0
    short, long = json.loads((tmp_path / "results.json").read_text())["rows"]
    for way in ("incremental", "recompute", "transformer_lm"):
        assert short[way]["chars_per_s"] > 0 and long[way]["chars_per_s"] > 0
    # fairseq's state holds every position; ours stops at the bottom layer's reach (w = 32).
    assert long["transformer_lm"]["state_mib"] == pytest.approx(short["transformer_lm"]["state_mib"] * 40 / 16)
    ours = short["incremental"]["state_mib"], long["incremental"]["state_mib"]
    assert ours[0] < ours[1] < ours[0] * 40 / 16
    assert "state MiB" in capsys.readouterr().out


def test_bench_prep_docs_times_every_worker_count_on_the_same_corpus(tmp_path, capsys):
    code = main(["bench", "prep-docs", "--mb", "0.3", "--workers", "1", "--bpe-vocab", "400", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["text_bytes"] >= 300_000
    run = data["runs"][0]
    assert run["workers"] == 1 and run["tokens"] > 0
    assert run["mb_per_s"] == pytest.approx(data["text_bytes"] / 1e6 / run["seconds"], rel=1e-6)
    assert "MB/s/worker" in capsys.readouterr().out


def test_bench_scale_trains_two_ranks_together(tmp_path):
    """As a process (a warm start here): fairseq-train and torchrun are found beside its
    interpreter, so they start warm too. The two processes are one fairseq job, read from
    fairseq's own log that the bench keeps: rank 1 joined it, each update's gradients were
    all-reduced over both (fairseq's ``ddp_backend`` wraps the model, and its logged batch
    sums both ranks' sequences), and the bench's figures are that log's."""
    import statistics

    from longformer_fs.benchmarks.scale import log_path

    printed = run(BIN / "longformer-fs", "bench", "scale", "--processes", "2", "--seq-len", "64", "--updates", "2",
                  "--warmup", "1", "--layers", "1", "--width", "16", "--out", tmp_path)  # fmt: skip
    result = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert result["processes"] == 2 and "sequences/s" in printed, result
    log = log_path(tmp_path, 2).read_text()
    assert "distributed init (rank 1)" in log and "training on 2 devices" in log, log[-3000:]
    assert "'ddp_backend': 'legacy_ddp'" in log or "'ddp_backend': 'pytorch_ddp'" in log
    inner = [entry for _, entry in fairseq_json_logs(log, ("train_inner",))]
    timed = [entry for entry in inner if int(entry["num_updates"]) > 1]
    assert len(timed) == 2 and all(float(entry["bsz"]) == 2 for entry in inner)  # one sequence a rank
    assert result["steps_per_s"] == pytest.approx(statistics.median(float(e["ups"]) for e in timed))
    assert result["sequences_per_s"] == pytest.approx(2 * result["steps_per_s"])


@pytest.mark.parametrize("bench", ["lm", "led", "finetune"])
def test_bench_half_precision_needs_a_gpu(bench, tmp_path, capsys):
    assert main(["bench", bench, "--bf16", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "--bf16 needs --device cuda" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    import longformer_fs.commands.info as info

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(info, "main", interrupted)
    result = cli("info")
    assert result.returncode == 130 and result.stderr.strip() == "longformer-fs: interrupted"


def test_bench_pack_trains_three_ways_on_one_corpus_and_only_complete_crosses_documents(tmp_path, capsys):
    code = main(["bench", "pack", "--seq-len", "256", "--window", "16", "--batch-size", "4", "--documents", "60",
                 "--valid-documents", "8", "--median", "60", "--tokens", "3000", "--finetune-tokens", "3000",
                 "--layers", "1", "--width", "64", "--out", str(tmp_path)])  # fmt: skip
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    # Fine-tuning: fairseq's shuffled rows pad most; bucketing and packing less, packing least.
    tuned = results["finetune_rows"]
    assert set(tuned) == {"packed", "bucketed", "fairseq"}
    for row in tuned.values():
        assert row["real_tokens"] >= 3000 and row["tokens_per_s"] > 0 and row["documents_per_s"] > 0
    assert tuned["packed"]["padded_share"] < tuned["bucketed"]["padded_share"] < tuned["fairseq"]["padded_share"]
    assert tuned["packed"]["steps"] < tuned["fairseq"]["steps"]  # packed rows hold more documents
    assert set(results["finetune"]) == {"bucketed_speed_vs_fairseq", "packed_speed_vs_fairseq",
                                        "packed_speed_vs_bucketed", "packed_memory_vs_fairseq"}  # fmt: skip
    rows = results["rows"]
    assert set(rows) == {"packed", "complete_doc", "complete"}
    for row in rows.values():
        assert row["real_tokens"] >= 3000 and row["tokens_per_s"] > 0 and 0 < row["valid_bits"] < 12
    # Packed rows are full and sealed; complete's run across documents; complete_doc's are short.
    assert rows["packed"]["mixed_rows"] == rows["complete_doc"]["mixed_rows"] == 0 < rows["complete"]["mixed_rows"]
    assert rows["packed"]["padded_share"] < 0.05 and rows["packed"]["steps"] < rows["complete_doc"]["steps"]
    out = capsys.readouterr().out
    assert "real tok/s" in out and "bucketing alone:" in out
    assert main(["bench", "pack", "--parts", "mlm,speed", "--out", str(tmp_path)]) == 2
