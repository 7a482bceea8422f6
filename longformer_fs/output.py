"""How every command writes its output: all or nothing, and never over someone else's.

Every writer goes through this module: ``prep``, the converters (``import-hf``,
``convert-roberta``, ``convert-bart``), the exporters (``export-hf``, ``export-onnx``), the
report, ``check``'s records and the checkpoints the converters save. It is the only place
that moves a finished file into place.

- **Staged.** A directory ``OUT`` is written into ``.OUT.partial`` beside it
  (:func:`staged`), a file ``OUT`` into ``.OUT.partial`` (:func:`written_file`). They move
  in only once everything is written, so a command that fails (bad input found late, a
  full disk, Ctrl-C, a kill) leaves ``OUT`` as it was: never a model without its
  dictionary, nor a dataset without a split. A rerun clears what a killed run left.
- **Recorded.** A directory's record ``OUT/COMMAND.json`` (``prep.json``, ``import-hf.json``,
  ...) is moved in last. Its ``inputs`` say what the output was made from, every input
  file as one :func:`stamp` (path, size, mtime), and its ``written`` what the command wrote.
- **Guarded.** :func:`check`: ``OUT`` must be absent, empty, or this command's earlier
  output from the same input files (by path: an edited file is the same input, and a
  rerun that adds or drops a split still shares the others).
  Such a rerun refreshes the output (``prep`` first asks :func:`finished`: a rerun with
  exactly the same inputs has nothing to do). Anything else needs ``--force``, which
  replaces this command's files and leaves every other file alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterator

# The commands that write a directory with a record, and what their output is called in
# a refusal. Their records are OUT/COMMAND.json.
WRITERS = {"prep": "a prepared dataset", "import-hf": "an import", "convert-roberta": "a conversion",
           "convert-bart": "a conversion", "export-hf": "an export", "export-onnx": "an export"}  # fmt: skip
PARTIAL = ".partial"  # the suffix of what is being written: .OUT.partial beside OUT
# A stamp's keys: a file's, and a folder's (its file count and a digest of theirs).
_STAMP_KEYS = ({"file", "size", "mtime_ns"}, {"file", "files", "digest"})


class OutputRefused(FileExistsError):
    """``--out`` holds something this command may not write over; the message says what to pass."""


def stamp(path: Path) -> dict:
    """An input as a record keeps it, so that a rerun notices an edited or replaced file,
    and :func:`check` recognises the same inputs by their paths.

    A file: ``{"file": resolved path, "size": bytes, "mtime_ns": ns}``. A folder:
    ``{"file": resolved path, "files": count, "digest": sha1}`` over every file's relative
    path, size and mtime (a release of 100,000 files would swell a record by its stamps).
    """
    path = Path(path)
    if not path.is_dir():
        st = path.stat()
        return {"file": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    files = sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha1()
    for file in files:
        st = file.stat()
        digest.update(f"{file.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return {"file": str(path.resolve()), "files": len(files), "digest": digest.hexdigest()}


def sources(*paths: Path) -> dict:
    """The ``inputs`` of an output made from these files and nothing else (a converter's)."""
    return {"files": [stamp(p) for p in paths]}


def stamped_files(inputs) -> list[str]:
    """The paths of every :func:`stamp` anywhere in ``inputs`` (JSON-like), sorted: which
    files an output was made from, whatever else its inputs hold."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            if value.keys() in _STAMP_KEYS:
                found.add(value["file"])
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(inputs)
    return sorted(found)


def record_path(out: Path, command: str) -> Path:
    return Path(out) / f"{command}.json"


def read_record(out: Path, command: str) -> dict | None:
    """``command``'s record in the directory ``out``, or None (absent, or not a record)."""
    try:
        record = json.loads(record_path(out, command).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _same_sources(record: dict | None, inputs: dict, kind: str | None) -> bool:
    if record is None or (kind is not None and record.get("kind") != kind):
        return False
    recorded, given = set(stamped_files(record.get("inputs"))), set(stamped_files(inputs))
    # The same files, or some of them (a split added or dropped); a record without stamps is
    # this command's from before they were kept. Files all new are someone else's sources.
    return recorded == given or bool(recorded & given) or not recorded


def finished(out: Path, command: str, inputs: dict, kind: str | None = None) -> dict | None:
    """The record in ``out`` when a finished ``command`` run (of ``kind``) was made from
    exactly ``inputs`` (JSON-like: what ``json.loads(json.dumps(inputs))`` gives back)."""
    record = read_record(out, command)
    if record is None or record.get("inputs") != inputs or (kind is not None and record.get("kind") != kind):
        return None
    return record


def staging_path(out: Path) -> Path:
    """Where ``out`` (a file or a directory) is written before it moves in."""
    out = Path(out)
    return out.parent / f".{out.name}{PARTIAL}"


def check(out: Path, command: str, inputs: dict, force: bool = False, kind: str | None = None) -> None:
    """``out`` must be absent, empty, or ``command``'s output (of ``kind``) from the same
    input files as ``inputs``; with ``force``, anything but a file.

    Input files inside ``out`` (a download kept there) are not in the way, nor is a run of
    this command from the same files that was killed while moving its files in.

    Raises:
        OutputRefused: one line naming what ``out`` holds, and ``--force``.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputRefused(f"--out: {out} is a file; give a directory")
    if not _may_write(out, command, inputs, force, kind):
        _refuse(out)
    _remove(staging_path(out))  # what a killed run left


def _may_write(out: Path, command: str, inputs: dict, force: bool, kind: str | None) -> bool:
    if force or not out.exists() or _same_sources(read_record(out, command), inputs, kind):
        return True
    if _same_sources(read_record(staging_path(out), command), inputs, kind) and not record_path(out, command).exists():
        return True  # killed while publishing: its record had not moved in yet
    inside = {Path(p).name for p in stamped_files(inputs) if Path(p).parent == out.resolve()}
    return not any(p.name not in inside and not p.name.endswith(PARTIAL) for p in out.iterdir())


def _refuse(out: Path) -> None:
    names = sorted(p.name for p in out.iterdir() if not p.name.endswith(PARTIAL))
    for writer, what in WRITERS.items():
        record = read_record(out, writer)
        if record is not None:
            origin = _folders(stamped_files(record.get("inputs")))
            raise OutputRefused(
                f"--out: {out} already holds {what} of {origin} ({writer}); "
                "choose another directory or pass --force to replace it"
            )
    raise OutputRefused(
        f"--out: {out} holds files this command did not write ({', '.join(names[:5])}); "
        "choose an empty directory or pass --force"
    )


def _folders(files: list[str]) -> str:
    """Where ``files`` are, for a message: their folders, the first two and a count."""
    folders = sorted({str(Path(f).parent) for f in files})
    if not folders:
        return "other inputs"
    shown = " and ".join(folders[:2])
    return shown if len(folders) <= 2 else f"{shown} and {len(folders) - 2} more folders"


class Staged:
    """A directory output being written: files go into :attr:`dir`, and :meth:`publish`
    moves them into ``out`` with the record last.

    Attributes:
        out: the directory written.
        dir: where its files are written first (``.OUT.partial``, beside it).
    """

    def __init__(self, out: Path, command: str):
        self.out, self.command = Path(out), command
        self.dir = staging_path(out)

    def publish(self, record: dict) -> dict:
        """Move every staged file and folder into ``out`` (replacing its namesake), remove
        the files ``command``'s previous record listed that this run did not write, and
        move the record in last; returns the record, with ``written`` filled in.

        ``record`` holds ``inputs`` (:func:`check` reads its stamps) and whatever the
        command reports. Every change to ``out`` is a rename, the old record's first: a
        kill before it leaves ``out`` whole, and after it leaves ``out`` without this
        command's record, which :func:`check` tells from someone else's directory by the
        new record, still staged.
        """
        written = sorted(p.name for p in self.dir.iterdir())
        record = {**record, "written": written}
        previous = read_record(self.out, self.command) or {}
        record_path(self.dir, self.command).write_text(json.dumps(record, indent=2, default=str) + "\n")
        self.out.mkdir(exist_ok=True)
        if record_path(self.out, self.command).exists():  # first: no record may speak for a mix of files
            _move(record_path(self.out, self.command), self.dir / ".previous.json")
        for name in written:
            _move(self.dir / name, self.out / name)
        for name in previous.get("written", ()):
            if name not in written and Path(name).name == name:
                _remove(self.out / name)
        _move(record_path(self.dir, self.command), record_path(self.out, self.command))
        _remove(self.dir)
        return record


@contextlib.contextmanager
def staged(out: Path, command: str) -> Iterator[Staged]:
    """A :class:`Staged` output for ``out``, after clearing what a killed run left.

    Leaving on an error (or without :meth:`Staged.publish`) moves nothing: the staged
    files, and the folders made for them (``out``'s missing parents), are removed again.
    """
    staging = Staged(out, command)
    with _parents_made_for(staging.out):
        _remove(staging.dir)
        staging.dir.mkdir()
        try:
            yield staging
        finally:
            _remove(staging.dir)


@contextlib.contextmanager
def guarded_output(out: Path, command: str, report: dict, force: bool = False) -> Iterator[Path]:
    """A directory to write ``command``'s files for ``out`` into, after :func:`check`; on
    leaving without an error they are published with ``report`` (as filled in by then,
    ``inputs`` included) as the record."""
    check(out, command, report["inputs"], force)
    with staged(out, command) as staging:
        yield staging.dir
        staging.publish(report)


@contextlib.contextmanager
def written_file(path: Path) -> Iterator[Path]:
    """A path to write the file ``path`` at (``.NAME.partial`` beside it); moved to ``path``
    on leaving without an error, removed on an error, with the folders made for it."""
    path = Path(path)
    staged_file = staging_path(path)
    with _parents_made_for(path):
        _remove(staged_file)
        try:
            yield staged_file
            _move(staged_file, path)
        finally:
            _remove(staged_file)


@contextlib.contextmanager
def guarded_file(out: Path, force: bool = False, rerun: bool = False) -> Iterator[Path]:
    """:func:`written_file` for an ``--out`` file: an existing one is replaced only with
    ``force``, or on a ``rerun`` (``out`` is this command's own output from the same
    source files, as its record inside the file says: the format's to read).

    Raises:
        OutputRefused: ``out`` exists and neither ``force`` nor ``rerun`` is set, or is
            a directory.
    """
    out = Path(out)
    if out.is_dir():
        raise OutputRefused(f"--out: {out} is a directory; give the file to write")
    if out.exists() and not (force or rerun):
        raise OutputRefused(f"--out: {out} already exists; choose another file or pass --force to replace it")
    with written_file(out) as target:
        yield target


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole: a reader never sees half of it."""
    return _write_text(path, text)


def write_json(path: Path, value) -> Path:
    """:func:`write_text` of ``value`` as indented JSON (what JSON cannot hold, as ``str``)."""
    return _write_text(path, json.dumps(value, indent=2, default=str) + "\n")


def move(source: Path, target: Path) -> Path:
    """Move the finished file ``source`` to ``target`` (replacing it) in one step; both on
    one file system (a command's own scratch files)."""
    _move(Path(source), Path(target))
    return Path(target)


def _write_text(path: Path, text: str) -> Path:
    with written_file(path) as staged_file:
        staged_file.write_text(text, encoding="utf-8")
    return Path(path)


def _move(source: Path, target: Path) -> None:
    if target.is_dir() and not target.is_symlink() and source.is_dir():
        shutil.rmtree(target)
    os.replace(source, target)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _parents_made_for(out: Path) -> Iterator[None]:
    """Make ``out``'s missing parents; remove them again if the block fails."""
    missing = [path for path in out.parents if not path.exists()]  # nearest first
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in missing:
            with contextlib.suppress(OSError):  # not empty: not ours to remove
                path.rmdir()
        raise
