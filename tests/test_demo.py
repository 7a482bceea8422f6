"""`make demo`'s machinery: five real fairseq-hydra-train phases, evaluation, table, plot."""

import json
import subprocess  # make demo's command as the README gives it

from helpers import BIN, ROOT, command


def test_demo_runs_all_phases_and_scores_every_character(tmp_path):
    out = tmp_path / "demo"
    demo = [BIN / "longformer-fs", "demo", "--out", out, "--updates", "4,3,3,2,2", "--eval-window", "128",
            "--eval-step", "32"]  # fmt: skip
    result = subprocess.run(command(demo), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    history = json.loads((out / "demo.json").read_text())
    assert [h["phase"] for h in history] == [1, 2, 3, 4, 5]
    assert [h["seq"] for h in history] == [32, 64, 128, 256, 512]
    assert all(h["scored"] == 23040 for h in history)  # the whole test split, once
    for phase in range(2, 6):  # each phase was initialised from the previous one's weights
        previous = out.resolve() / "checkpoints" / f"phase{phase - 1}" / "checkpoint_last.pt"
        assert f"loading pretrained model from {previous}" in (out / "logs" / f"phase{phase}.log").read_text()
    assert (out / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert "test BPC" in result.stdout
