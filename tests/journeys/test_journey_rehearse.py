"""docs/gpus.md's rehearsal, as a user runs it on a laptop: what ``auto`` takes on an sm90 GPU,
then every part of the report on the GPU's path, on this CPU.

What an sm90 GPU takes is stated here from the backends' documented limits (FlashAttention:
fp16/bf16, no position term; FlexAttention: no dropout), not read from the code that chooses.
The report's parts must each run their GPU path to the end. The oracle part asks each backend
in the dtype of the call, so ``flash`` is asked only in bf16; asked without the dtype, it took
the float32 cases and raised on the first. The end-to-end parts' band calls go where a GPU's
training would send them. The parts that run in processes of their own say why they are
skipped, and no target is judged on a rehearsal's times.
"""

from __future__ import annotations

import json
import re

import pytest
from journey import Journey, Workspace

from longformer_fs.devices import RehearsedGpu

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

JOURNEY = Journey("rehearse")
NOT_REHEARSED = {"cuda_tests", "pack", "text8", "finetune_triviaqa", "mlm_base", "summarize_arxiv"}
SM90 = {  # call -> the backend an sm90 GPU without a `check` record takes
    "cuda/plain + dropout/float16": "flash",  # the fine-tuning, MLM and LED recipes' training
    "cuda/plain + dropout/bfloat16": "flash",
    "cuda/plain/bfloat16": "flash",
    "cuda/relative/float32": "flex",  # the character LM's (relative positions, no attention dropout)
    "cuda/relative/bfloat16": "flex",
    "cuda/plain + dropout/float32": "chunks",  # FlashAttention has no float32, FlexAttention no dropout
}


def test_the_report_rehearsed_on_this_cpu(tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    logs = JOURNEY.run(workspace)
    info = JOURNEY.stdout[JOURNEY.steps[0]]
    for call, backend in SM90.items():
        assert re.search(rf"^\s+{re.escape(call)}\s+{backend} on cuda: ", info, re.M), (call, info)
    assert RehearsedGpu().name in info

    out = workspace.path("report-rehearsal")
    report = json.loads((out / "report.json").read_text())
    parts = report["parts"]
    assert report["settings"]["rehearsal"] and report["machine"]["gpu"] == RehearsedGpu().name
    skipped = {name for name, part in parts.items() if part["status"] == "skipped"}
    assert skipped == NOT_REHEARSED and all(parts[name]["error"].startswith("not rehearsed: ") for name in skipped)
    failed = {name: part.get("error") for name, part in parts.items() if name not in skipped and part["status"] != "ok"}
    assert not failed, (failed, logs[JOURNEY.steps[-1]][-3000:])
    assert all(row["met"] is None and row["measured"].startswith("rehearsed") for row in report["targets"])
    assert "**A rehearsal**" in (out / "report.md").read_text()

    # The oracle asked every backend about each call in its dtype, and ran each it may take.
    rows = parts["oracle"]["rows"]
    flash = {row["dtype"]: row for row in rows if row["backend"] == "flash"}
    assert flash["bfloat16"].get("rehearsed") and "float16 or bfloat16" in flash["float32"]["skipped"]
    assert {row["backend"] for row in rows if row.get("rehearsed")} >= {"flash", "flex", "kernel", "chunks"}
    # check verified flash with and without the recipes' dropout, on the GPU's path.
    assert any("dropout=0.1" in case for case in _check_cases(workspace)) and not parts["check"]["failures"]

    # The end-to-end parts' band calls went where a GPU's training sends them.
    profiles = {name: json.loads((out / "profiles" / f"{name}.json").read_text()) for name in ("finetune", "led", "lm")}
    assert set(profiles["finetune"]["models"]["ours"]["attention"]["backends"]) <= {"flash (plain + dropout)"}
    assert parts["lm"]["longformer_lm_small"]["attention"]["backends"].keys() <= {"flex (relative)"}
    assert profiles["led"]["models"]["led"]["profile"]["h2d_copies"]["count"] == 0
    # The reads of the device's values each part made are named, ours apart.
    assert "global_token_index" in " ".join(parts["oracle"]["rehearsal"]["reads"])  # the layer without a bound
    assert "modeling_longformer.py" in " ".join(parts["finetune"]["rehearsal"]["their_reads"])  # HF's


def _check_cases(workspace: Workspace) -> list[str]:
    log = (workspace.path("report-rehearsal") / "logs" / "check.log").read_text()
    return [case["case"] for case in json.loads(log[log.index("{") :])["results"] if case["backend"] == "flash"]
