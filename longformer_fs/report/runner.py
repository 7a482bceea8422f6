"""Running the report's parts: each in a forked child, under its own time cap and the budget.

The parent imports torch, fairseq and transformers once and never touches a device; each
part runs in a child forked from it, so a part pays no import, a hang or a crash ends only
that part, and CUDA is initialised in the child (a CUDA context does not survive a fork).
The child is the leader of its own process group: a part out of time is killed with every
process it started (``make``, ``fairseq-hydra-train``, pytest).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Callable

from .. import devices, output
from ..rehearsal import watched

GROUPS = ("verify", "attention speed", "end to end", "recipes", "longest document")
NOT_REHEARSED = "not rehearsed: "  # how a part a rehearsal cannot run is recorded (Part.not_rehearsed)


@dataclass
class Context:
    """What a part knows of the run.

    Attributes:
        device: ``cuda``, ``cpu``, or ``meta`` in a rehearsal (it stands for the GPU).
        toy: every size shrunk to what a CPU runs in seconds.
        work: scratch space shared by the parts (the recipes' corpora and models).
        log: the part's own log file (its stdout and stderr go there too).
        profiles: where a part keeps its profiles (``OUT/profiles``), or None: not kept.
    """

    device: str
    toy: bool
    work: Path
    log: Path
    figures: dict = field(default_factory=dict)
    _partial: Path | None = None
    profiles: Path | None = None

    def record(self, **figures) -> None:
        """Keep ``figures`` now: a part that runs out of time still reports what it measured."""
        self.figures.update(figures)
        if self._partial is not None:
            output.write_json(self._partial, self.figures)

    def say(self, line: str) -> None:
        print(line, flush=True)


@dataclass(frozen=True)
class Part:
    """One measurement of the report.

    Attributes:
        name: its key in ``report.json``.
        group: one of :data:`GROUPS`.
        what: one line for people.
        cap_s: the longest it may run on a GPU; ``toy_cap_s`` with ``--toy``.
        least_s: it is started only if this much of the budget is left.
        run: ``run(ctx)`` records figures through ``ctx.record`` and may return more; it
            raises :class:`PartFailed` (or anything) when what it checks does not hold.
        not_rehearsed: why a rehearsal (``--rehearse``) cannot run the part, or None when it
            can: the parts whose work is in processes of their own (``make``, ``pytest``),
            which the rehearsal's device does not reach.
    """

    name: str
    group: str
    what: str
    _: KW_ONLY  # the three budgets by name: three numbers in a row are easy to swap
    cap_s: float
    toy_cap_s: float
    least_s: float
    run: Callable[[Context], dict | None]
    not_rehearsed: str | None = None


class PartFailed(Exception):
    """A part ran to its end, and what it checks does not hold."""


def _child(part: Part, ctx: Context, result: Path) -> None:
    """In the forked child: run the part with its output in its log, write its result, exit."""
    os.setsid()
    with open(ctx.log, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    try:
        more = _rehearsed(part, ctx) if devices.rehearsing() else part.run(ctx)
        ctx.figures.update(more or {})
        payload = {"status": "ok", **ctx.figures}
    except BaseException as err:  # noqa: B036 (every failure is the part's result, never the report's end)
        traceback.print_exc()
        message = str(err).strip().splitlines()
        payload = {"status": "failed", "error": f"{type(err).__name__}: {message[0] if message else ''}"[:500]}
        payload.update(ctx.figures)
    output.write_json(result, payload)
    sys.stdout.flush()
    os._exit(0)


def _rehearsed(part: Part, ctx: Context) -> dict | None:
    """``part.run(ctx)`` in a rehearsal, under a :class:`~longformer_fs.rehearsal.HostWatch`: what
    would raise on the GPU raises; every read of the device's values is answered and counted,
    its sites recorded (``rehearsal``), ours apart from fairseq's and HF's."""
    with watched(part.name, strict=False) as watch:
        try:
            return part.run(ctx)
        finally:
            seen = {"reads": watch.reads, "copies": watch.copies, "their_reads": watch.their_reads,
                    "their_copies": watch.their_copies}  # fmt: skip
            ctx.record(rehearsal={name: dict(counts) for name, counts in seen.items()})


def run_part(part: Part, ctx: Context, timeout_s: float) -> dict:
    """``part`` in a forked child, killed (with its process group) after ``timeout_s``."""
    result = ctx.log.with_suffix(".result.json")
    ctx._partial = ctx.log.with_suffix(".partial.json")
    for stale in (result, ctx._partial):
        stale.unlink(missing_ok=True)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(part, ctx, result)
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout_s:
            timed_out = True
            _kill_group(pid)
            os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    seconds = time.monotonic() - start
    if result.is_file():
        payload = json.loads(result.read_text())
    else:
        payload = json.loads(ctx._partial.read_text()) if ctx._partial.is_file() else {}
        if timed_out:
            reason = f"ran out of time: stopped after {seconds:.0f} s (its cap {timeout_s:.0f} s)"
        else:
            reason = f"the part's process died ({_describe(status)}); see {ctx.log.name}"
        payload = {"status": "failed", "error": reason, **payload}
    _kill_group(pid)  # whatever it started and left behind
    status = payload.pop("status")
    payload.pop("seconds", None)
    return {"status": status, "seconds": round(seconds, 1), **payload}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        signal_number = os.WTERMSIG(status)
        name = signal.Signals(signal_number).name
        return f"killed by {name}" + (": out of memory?" if signal_number == signal.SIGKILL else "")
    return f"exit status {os.WEXITSTATUS(status)}"


def run_all(
    parts: list[Part],
    make_context: Callable[[Part], Context],
    budget_s: float,
    toy: bool,
    on_result,
    rehearsing: bool = False,
) -> dict[str, dict]:
    """Every part in order while the budget lasts; ``on_result(name, results)`` after each. In a
    rehearsal, the parts it cannot run are skipped, saying why."""
    start = time.monotonic()
    results = {}
    for part in parts:
        left = budget_s - (time.monotonic() - start)
        cap = part.toy_cap_s if toy else part.cap_s
        least = min(part.least_s, cap)
        if rehearsing and part.not_rehearsed:
            results[part.name] = {"status": "skipped", "seconds": 0.0, "error": NOT_REHEARSED + part.not_rehearsed}
        elif left < least:
            results[part.name] = {
                "status": "skipped",
                "seconds": 0.0,
                "error": f"budget spent: {max(left, 0):.0f} s left of --budget, it needs at least {least:.0f} s",
            }
        else:
            results[part.name] = run_part(part, make_context(part), min(cap, left))
        on_result(part.name, results)
    return results
