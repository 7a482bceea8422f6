"""How every converter and exporter writes its output: all or nothing, never over another model.

``import-hf``, ``convert-roberta``, ``convert-bart`` and ``export-hf`` write a directory through
:func:`guarded_output`:

- **staged**: the files go into a folder beside ``--out`` and move in only once all of
  them are written, so a command that fails (bad input found late, a full disk, Ctrl-C)
  leaves ``--out`` exactly as it was, and never a model without its dictionary or config;
- **guarded**: ``--out`` must be absent, empty, or this command's earlier output from the
  same source files (running a command again refreshes it); anything else needs
  ``--force``. The record ``OUT/COMMAND.json`` (the command's report, with the source
  files' names and sizes) is what tells an earlier output apart.

``export-onnx`` writes a directory for an LED (three files, the same way), and one file for
an encoder, through :func:`guarded_file`: the same promise for a file ``--out`` (written
beside it, moved in whole; an existing file needs ``--force``, unless the command reads in
it its own record from the same source files: ``rerun``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

# The commands that write through guarded_output (their records are OUT/COMMAND.json), and
# what their output is called in messages.
WRITERS = {"import-hf": "an import", "convert-roberta": "a conversion", "convert-bart": "a conversion",
           "export-hf": "an export", "export-onnx": "an export"}  # fmt: skip


def source_files(*paths: Path) -> dict:
    """What identifies the files an output was made from, for ``--out``'s guard: where,
    their names and sizes."""
    paths = [Path(p) for p in paths]
    return {"source": str(paths[0].parent.resolve()), "files": {p.name: p.stat().st_size for p in paths}}


def record_path(out_dir: Path, command: str) -> Path:
    return Path(out_dir) / f"{command}.json"


@contextlib.contextmanager
def guarded_output(out_dir: Path, command: str, report: dict, force: bool = False) -> Iterator[Path]:
    """A directory to write ``command``'s files for ``out_dir`` into (:func:`staged_output`),
    after :func:`check_output`; ``report`` (with ``source_files``) is written last, as the
    record ``out_dir/COMMAND.json``.

    Raises:
        FileExistsError: ``out_dir`` holds something else, and ``force`` is not set.
    """
    if not force:
        check_output(out_dir, command, report["source_files"])
    with staged_output(out_dir) as staging:
        yield staging
        record_path(staging, command).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def check_output(out_dir: Path, command: str, source_files: dict) -> None:
    """``out_dir`` must be absent, empty, or ``command``'s output from ``source_files``.

    Raises:
        FileExistsError: naming what ``out_dir`` holds and ``--force``.
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise FileExistsError(f"--out: {out_dir} is a file; give a directory")
    if not any(out_dir.iterdir()):
        return
    earlier = {}
    for writer in WRITERS:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # absent, or not our record after all
            earlier[writer] = json.loads(record_path(out_dir, writer).read_text(encoding="utf-8"))["source_files"]
    if earlier.get(command) == source_files:
        return
    what = "other files"
    if earlier:
        writer, files = next(iter(earlier.items()))
        what = f"{WRITERS[writer]} of {files.get('source') if isinstance(files, dict) else files} ({writer})"
    raise FileExistsError(
        f"--out: {out_dir} already holds {what}; choose another directory or pass --force to replace it"
    )


@contextlib.contextmanager
def staged_output(out_dir: Path) -> Iterator[Path]:
    """A directory to write ``out_dir``'s files into.

    On leaving without an error, each file (or folder) written there replaces its
    namesake in ``out_dir``, which is created if needed; files of ``out_dir`` that were
    not written stay. On an error nothing is moved, and the folders this call created
    (``out_dir``'s missing parents) are removed again.
    """
    out_dir = Path(out_dir)
    with _parents_made_for(out_dir):
        with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.") as staging:
            yield Path(staging)
            out_dir.mkdir(exist_ok=True)
            for path in Path(staging).iterdir():
                target = out_dir / path.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(path, target)


@contextlib.contextmanager
def guarded_file(out: Path, force: bool = False, rerun: bool = False) -> Iterator[Path]:
    """A path to write the file ``out`` at, beside it; moved to ``out`` on leaving
    without an error, removed on an error (with the folders made for it).

    Args:
        rerun: ``out`` is this command's own output from the same source files, as its
            record inside the file says (the format's to read): it is refreshed.

    Raises:
        FileExistsError: ``out`` exists and neither ``force`` nor ``rerun`` is set, or is
            a directory.
    """
    out = Path(out)
    if out.is_dir():
        raise FileExistsError(f"--out: {out} is a directory; give the file to write")
    if out.exists() and not (force or rerun):
        raise FileExistsError(f"--out: {out} already exists; choose another file or pass --force to replace it")
    with _parents_made_for(out):
        descriptor, staged = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        os.close(descriptor)
        try:
            yield Path(staged)
            os.replace(staged, out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)


@contextlib.contextmanager
def _parents_made_for(out: Path) -> Iterator[None]:
    """Make ``out``'s missing parents; remove them again if the block fails."""
    missing = [path for path in (out, *out.parents) if not path.exists()]  # nearest first
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in missing:
            with contextlib.suppress(OSError):  # not empty: not ours to remove
                path.rmdir()
        raise
