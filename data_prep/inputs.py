"""The user's input files, checked for being what the command expects before they are parsed.

A file of the wrong kind (a PDF given as JSONL, a bz2 archive given as JSON) otherwise
fails deep in a parser with a message about bytes or tokens; :func:`wrong_kind` names
what the file is instead, from its first bytes. :func:`load_json` is the one loader of
whole-file JSON inputs (``prep qa``, ``prep wikihop``), with a one-line
:class:`~.fairseq_dataset.PrepError` for each way such a file can be wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

from .fairseq_dataset import PrepError

# Leading bytes of binary formats users mix up with text inputs, and their names.
MAGIC = (
    (b"%PDF-", "PDF"),
    (b"BZh", "bzip2-compressed"),
    (b"\x1f\x8b", "gzip-compressed"),
    (b"PK\x03\x04", "zip archive"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"),
)


def file_kind(path: Path) -> str | None:
    """The name of the binary format ``path`` starts like ("PDF", "bzip2-compressed" ...), or None."""
    with open(path, "rb") as f:
        head = f.read(8)
    return next((name for magic, name in MAGIC if head.startswith(magic)), None)


def wrong_kind(path: Path, expected: str, accept: tuple[str, ...] = ()) -> str | None:
    """Why ``path`` is not an ``expected`` file ("a PDF file, not JSONL"), or None if it may be.

    Args:
        expected: what the command reads, for the message ("JSONL", "text").
        accept: binary kinds the caller opens itself (a ``.bz2`` dump).
    """
    kind = file_kind(path)
    if kind is None or kind in accept:
        return None
    return f"a {kind} file, not {expected}"


def load_json(path: Path) -> object:
    """A whole-file JSON input, or a PrepError naming the file and what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise PrepError(f"{path}: not found")
    problem = wrong_kind(path, "JSON")
    if problem:
        raise PrepError(f"{path}: {problem}")
    raw = path.read_bytes()
    if not raw.strip():
        raise PrepError(f"{path}: empty; expected a JSON document")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is not an error
    except UnicodeDecodeError as err:
        raise PrepError(f"{path}: not UTF-8 text (byte {err.start}); JSON files are UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PrepError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
