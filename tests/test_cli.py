"""The longformer-fs command line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from longformer_fs.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "longformer_fs.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_info_reports_versions_and_backends():
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    assert "torch" in result.stdout and "fairseq" in result.stdout
    assert "chunks" in result.stdout and "reference" in result.stdout
    report = json.loads(run_cli("info", "--json").stdout)
    import torch

    assert report["versions"]["torch"] == torch.__version__
    assert report["attention_backends"]["chunks"]["available"] is True
    assert report["auto_backend"] in ("kernel", "chunks")


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "longformer-fs"
    if not exe.exists():
        pytest.skip("package not installed into this interpreter's environment")
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "info" in result.stdout and "bench" in result.stdout


def test_bench_attention_writes_table_json_and_plot(tmp_path, capsys):
    code = main(["bench", "attention", "--seq-lens", "64,96", "--window", "4", "--heads", "2",
                 "--head-dim", "8", "--repeat", "1", "--impls", "chunks,reference,sdpa",
                 "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "fwd+bwd ms" in out and "xchunks" in out
    data = json.loads((tmp_path / "results.json").read_text())
    got = {(r["impl"], r["seq_len"]) for r in data["results"]}
    assert got == {(i, n) for i in ("chunks", "reference", "sdpa") for n in (64, 96)}
    for r in data["results"]:
        assert r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 and r["peak_mib"] > 0
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_rejects_unknown_implementation(tmp_path, capsys):
    assert main(["bench", "attention", "--impls", "flashy", "--out", str(tmp_path)]) == 2
    assert "--impls" in capsys.readouterr().err
