"""The README's and docs/' shell commands, as the tests read them.

Every ``bash`` block of a page is marked on the line above it, either as (part of) a user
journey that ``tests/journeys/`` runs as written, or as a block it cannot run here and why::

    <!-- journey: triviaqa -->
    <!-- not a journey: needs GPUs -->

A journey's commands are its blocks' in page order (docs/ first, the README last),
each command once: the README repeats steps of the docs' journeys and adds none.
"""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_BLOCK = re.compile(r"^(?:<!-- (?P<mark>[^\n]*?) -->\n)?```bash\n(?P<body>.*?)^```", re.M | re.S)
_JOURNEY, _NOT_RUN = "journey: ", "not a journey: "


@dataclass(frozen=True)
class Block:
    """A ``bash`` block: its page, its mark (None when unmarked) and its command lines."""

    page: Path
    mark: str | None
    lines: tuple[str, ...]

    @property
    def journey(self) -> str | None:
        return self.mark[len(_JOURNEY) :] if self.mark and self.mark.startswith(_JOURNEY) else None

    @property
    def not_run(self) -> bool:
        return bool(self.mark) and self.mark.startswith(_NOT_RUN) and len(self.mark) > len(_NOT_RUN)


def command_lines(body: str) -> list[str]:
    """A block's commands: continuation lines joined, comments and blank lines cut."""
    lines = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(" ".join(line.split()))
    return lines


def blocks(page: Path) -> list[Block]:
    return [Block(page, m["mark"], tuple(command_lines(m["body"]))) for m in _BLOCK.finditer(page.read_text())]


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def journeys() -> dict[str, list[str]]:
    """Each journey's commands, in order, each once."""
    found: dict[str, list[str]] = {}
    for block in all_blocks():
        if block.journey:
            steps = found.setdefault(block.journey, [])
            steps += [line for line in block.lines if line not in steps]
    return found


def words(line: str) -> list[str]:
    """A command line's words, as the shell splits them (a quote a cut comment left open
    falls back to plain splitting: the words are enough here)."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()
