"""Running a journey of the README and docs/ as a user runs it (tests/pages.py reads them).

A journey runs in a :class:`Workspace`, a fresh directory that looks like the user's
checkout (every top-level entry of this one linked in, the venv active) holding the
inputs the pages name, in their official layouts. Each command runs through bash, as
written. A test may append words to a command only to make it small (``HYDRA_ARGS``, a
shorter ``--max-len``), and only words the journey's own pages document
(:func:`undocumented`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import helpers
from pages import ROOT, all_blocks, journeys


class Workspace:
    """A directory to run a journey in, laid out as the user's checkout.

    Its ``.venv`` is a view of this checkout's venv (each entry linked) with a fresh
    install stamp, so ``make`` takes the install as done, as it is; its commands import
    the package from the workspace, as a user's import it from their checkout. Its
    commands start warm (the suite's view, tests/zygote.py) unless ``cold``: then they are
    this venv's own, each a new interpreter (tests/test_cold_lane.py).
    """

    def __init__(self, root: Path, cold: bool = False):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        for name in sorted({line.split("/", 1)[0] for line in tracked.splitlines()}):
            (self.root / name).symlink_to(ROOT / name)
        source = ROOT / ".venv" if cold else helpers.VENV
        helpers.venv_view(self.root / ".venv", source)
        # The venv's editable install points at the user's checkout: here, at this one.
        path = f"{source / 'bin'}{os.pathsep}{os.environ['PATH']}"
        self.env = dict(os.environ, PATH=path, PWD=str(self.root), PYTHONPATH=str(self.root))
        for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):  # a make running the tests is not the user's
            self.env.pop(name, None)

    def path(self, name: str) -> Path:
        return self.root / name

    def run(self, line: str, timeout: int = 600) -> subprocess.CompletedProcess:
        """``line`` through bash in the workspace, as a user types it."""
        return subprocess.run(
            ["bash", "-c", line], cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout
        )


@dataclass
class Journey:
    """A journey's commands, and the words a test appends to some of them.

    Attributes:
        name: the journey's mark in the pages.
        extras: command prefix (as the page writes the command) -> words appended to every
            command that starts so.
    """

    name: str
    extras: dict[str, str] = field(default_factory=dict)
    # After run: each step's standard output alone (run returns both streams together).
    stdout: dict[str, str] = field(default_factory=dict)

    @property
    def steps(self) -> list[str]:
        return journeys()[self.name]

    def pages_text(self) -> str:
        return "\n".join(sorted({b.page.read_text() for b in all_blocks() if b.journey == self.name}))

    def command(self, step: str) -> str:
        """``step`` with its extras appended."""
        extra = [words for prefix, words in self.extras.items() if step.startswith(prefix)]
        return " ".join([step, *extra])

    def run(self, workspace: Workspace) -> dict[str, str]:
        """Every step in order, each of which must succeed: each step's output."""
        assert self.steps, f"no journey {self.name!r} in the pages"
        unused = [prefix for prefix in self.extras if not any(s.startswith(prefix) for s in self.steps)]
        assert not unused, f"{self.name}: extras for commands the pages no longer have: {unused}"
        missing = undocumented(" ".join(self.extras.values()), self.pages_text())
        assert not missing, f"{self.name}: the pages do not document {missing}, which the test gives"
        outputs = {}
        for step in self.steps:
            start = time.monotonic()
            result = workspace.run(self.command(step))
            print(f"{time.monotonic() - start:6.1f} s  {step[:100]}")  # shown with a failure's output
            log = result.stdout + result.stderr
            assert result.returncode == 0, (
                f"{self.name}: `{self.command(step)}` exited {result.returncode}:\n{log[-5000:]}"
            )
            outputs[step] = log
            self.stdout[step] = result.stdout
        return outputs


_MAKE_VARIABLE = re.compile(r"^([A-Z][A-Z0-9_]*)=")
_HYDRA_OVERRIDE = re.compile(r"^[+~]*[a-z_]+\.[\w.]+=")


def undocumented(extra: str, text: str) -> list[str]:
    """The names in ``extra`` (make variables, flags, Hydra overrides) that ``text``, the
    journey's pages, does not mention: a test may use only what a user is told of."""
    missing = []
    for word in shlex.split(extra):
        if word.startswith("--"):
            name = word.split("=", 1)[0]
        elif match := _MAKE_VARIABLE.match(word):
            name = match[1]
            missing += undocumented(word[match.end() :], text)  # HYDRA_ARGS="...": the words it passes on
        elif _HYDRA_OVERRIDE.match(word):
            name = "overrides"  # appended to fairseq-hydra-train: the page must say overrides go there
        else:
            continue  # a flag's value
        if name not in text:
            missing.append(name)
    return sorted(set(missing))
