"""The documents people bring to summarize: ``.txt`` files, ``.jsonl`` records and ``.pdf``
papers, read the same way by ``longformer-fs summarize`` and by the torch-free ONNX
summarizer (:mod:`longformer_fs.serving.summarizer`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from longformer_fs.conventions import jsonl_records

from .fairseq_dataset import PrepError
from .pdf_papers import PdfError, read_paper


@dataclass
class InputDocument:
    id: str
    text: str


def read_documents(paths: Iterable[Path], text_field: str = "text") -> Iterator[InputDocument]:
    """Documents from ``.txt`` files (one each), ``.jsonl`` lines (``text_field``; an ``id``
    field names them) and ``.pdf`` papers (their body, without the abstract)."""
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"input: {path} does not exist")
        suffix = path.suffix.lower()
        if suffix == ".pdf":
            try:
                paper = read_paper(path)
            except PdfError as err:
                raise PrepError(f"input: {path}: {err}") from None
            yield InputDocument(str(path), paper.body or paper.abstract or "")
        elif suffix == ".jsonl":
            for origin, record, problem in jsonl_records(path):
                if problem:
                    raise PrepError(f"input: {origin}: {problem}")
                text = record.get(text_field) if isinstance(record, dict) else None
                if isinstance(text, list):
                    text = " ".join(map(str, text))
                if not isinstance(text, str):
                    raise PrepError(f"input: {origin}: no string field {text_field!r} (see --text-field)")
                yield InputDocument(str(record.get("id", origin)), text)
        else:
            try:
                yield InputDocument(str(path), path.read_text(encoding="utf-8"))
            except UnicodeDecodeError as err:
                raise PrepError(f"input: {path} is not UTF-8 text (byte {err.start})") from None
