"""The commands the README and docs/ show exist: each ``longformer-fs`` subcommand named in a
shell block answers ``--help``, and each ``make`` target named there is a rule (``make
-n``), the blocks no journey runs (GPUs, clusters) included. A renamed command or target
breaks this test, not a user's first try; ``tests/journeys/`` runs the journeys."""

import re
import subprocess  # make -n: each target the pages name is one of make's rules
from pathlib import Path

import pytest
from helpers import cli
from pages import ROOT, all_blocks, words

from longformer_fs.cli import COMMANDS


def invocations(program: str) -> set[tuple[str, ...]]:
    """``(page, words...)`` of every command in the pages' shell blocks that runs ``program``."""
    found = set()
    for block in all_blocks():
        for line in block.lines:
            for part in re.split(r"&&|\|\||;", line):
                command = words(part)
                while command and "=" in command[0] and not command[0].startswith("-"):  # VAR=value prefixes
                    command = command[1:]
                if command and Path(command[0]).name == program:
                    found.add((block.page.name, *command[1:]))
    return found


def subcommand(words: tuple[str, ...]) -> tuple[str, ...]:
    for n in (2, 1):
        if " ".join(words[:n]) in COMMANDS:
            return words[:n]
    return words[:1]


def targets(words: tuple[str, ...]) -> tuple[str, ...]:
    """The make targets of a command line (not its VAR=value settings or options)."""
    return tuple(w for w in words if "=" not in w and not w.startswith("-") and w != "...")


LONGFORMER_FS = sorted({(page, *subcommand(words)) for page, *words in invocations("longformer-fs")})
MAKE = sorted({(page, *targets(words)) for page, *words in invocations("make")})


def test_the_pages_show_commands():
    assert len(LONGFORMER_FS) >= 15 and len(MAKE) >= 8, (LONGFORMER_FS, MAKE)


def ids(cases):
    return [f"{page}: {' '.join(words)}" for page, *words in cases]


@pytest.mark.parametrize("page,words", [(p, tuple(w)) for p, *w in LONGFORMER_FS], ids=ids(LONGFORMER_FS))
def test_longformer_fs_subcommands_exist(page, words):
    assert " ".join(words) in COMMANDS, f"{page}: `longformer-fs {' '.join(words)}` is not a subcommand"
    assert cli(*words, "--help").returncode == 0


@pytest.mark.parametrize("page,words", [(p, tuple(w)) for p, *w in MAKE], ids=ids(MAKE))
def test_make_targets_exist(page, words):
    result = subprocess.run(["make", "-n", *words], cwd=ROOT, capture_output=True, text=True)
    assert "No rule to make target" not in result.stderr, f"{page}: `make {' '.join(words)}`: {result.stderr}"


def test_every_file_the_design_checklists_name_exists():
    """docs/design.md's "adding a fine-tuning task" and "adding an attention backend": the
    files they name (a new task's own files, named with X, aside) are where they say."""
    text = (ROOT / "docs" / "design.md").read_text()
    checklists = text[text.index("## Checklists") : text.index("## Tests")]
    named = set(re.findall(r"`((?:longformer_fs|data_prep|recipes|tests|docs)/[\w/.]+)`", checklists))
    assert len(named) >= 15, named
    missing = [path for path in sorted(named) if "X" not in path and not (ROOT / path).exists()]
    assert not missing, missing
