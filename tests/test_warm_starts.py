"""The suite's warm starts (tests/zygote.py) end as a new interpreter's processes end.

Each case runs tests/warm_cases.py through the zygote's ``python`` shim and, as the
oracle, in this venv's own interpreter: a warm command may not pass where the same
command started by a user's shell would hang, die or draw the same numbers twice.
"""

import os
import signal
import subprocess
import time

import pytest
from helpers import BIN, ROOT, VENV

CASES = ROOT / "tests" / "warm_cases.py"
pytestmark = pytest.mark.skipif(
    os.environ.get("LFS_COLD_STARTS") == "1", reason="LFS_COLD_STARTS=1: no warm starts to compare"
)


def warm(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV / "bin" / "python"), str(CASES), *args], capture_output=True, text=True,
                          timeout=60, **kwargs)  # fmt: skip


def cold(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), str(CASES), *args], capture_output=True, text=True, timeout=120)


def test_the_shim_starts_commands_warm():
    """The cases below compare something: the shim does send scripts of tests/ to the zygote."""
    assert VENV != BIN.parent and (VENV / "bin" / "python").resolve() != (BIN / "python").resolve()
    assert "LFS_ZYGOTE" in os.environ


def test_a_non_daemon_thread_left_running_fails_the_command():
    """A new interpreter joins its non-daemon threads before it exits: a command that leaves
    one running would hang at its end for a user. Warm, it fails, naming the thread; a
    thread that ends by itself soon is waited for, and an idle executor's workers leave, as
    they do at a new interpreter's end."""
    start = time.monotonic()
    result = warm("thread")
    assert result.returncode != 0 and "returned" in result.stdout, result
    assert "non-daemon thread" in result.stderr and "sleeps 120 s" in result.stderr, result.stderr
    assert time.monotonic() - start < 45
    for case in ("short-thread", "executor"):
        result = warm(case)
        assert result.returncode == 0 and result.stderr == "", result


def test_each_command_draws_its_own_random_numbers_as_a_new_interpreter_does():
    """A new interpreter seeds numpy's and torch's global generators from the OS: two runs
    draw different numbers (numpy's shown here in new interpreters; torch's seed is drawn
    alike, ``torch.initial_seed()`` differing from run to run). Two warm commands must
    draw differently too, not both from the zygote's state."""
    first, second = warm("random"), warm("random")
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    assert [a != b for a, b in zip(first.stdout.split(), second.stdout.split(), strict=True)] == [True, True]
    fresh = [cold("random-numpy") for _ in range(2)]
    assert all(r.returncode == 0 for r in fresh) and fresh[0].stdout != fresh[1].stdout


def test_a_closed_pipe_is_an_error_as_in_a_new_interpreter():
    """CPython ignores SIGPIPE: writing to ``| head`` after it exits raises BrokenPipeError
    instead of killing the process silently. Warm and cold end alike (status and error)."""
    ends = {}
    for name, python in (("warm", VENV / "bin" / "python"), ("cold", BIN / "python")):
        shell = f"set -o pipefail; '{python}' '{CASES}' pipe | head -1"
        result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
        assert result.stdout == "0\n"
        ends[name] = result.returncode, "BrokenPipeError" in result.stderr
    assert ends["warm"] == ends["cold"] == (1, True), ends


def test_a_killed_shim_takes_its_command_with_it(tmp_path):
    """A user's SIGKILL ends the command, which is the process it sent the signal to. Warm,
    that process is the shim: the forked command must go with it, not run on."""
    pidfile = tmp_path / "pid"
    shim = subprocess.Popen([str(VENV / "bin" / "python"), str(CASES), "sleep", str(pidfile)])
    deadline = time.monotonic() + 60
    while not pidfile.exists():
        assert shim.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    command = int(pidfile.read_text())
    assert command != shim.pid  # the command runs in the zygote's child, not in the shim
    shim.send_signal(signal.SIGKILL)
    shim.wait()
    deadline = time.monotonic() + 10
    while _running(command):
        assert time.monotonic() < deadline, f"the command (pid {command}) outlived its killed shim"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
