"""Readers of long-document sources: text folders, JSONL, Wikipedia dumps and PDFs.

Every reader yields :class:`Document` for what it could read and :class:`Skipped`
(with the file, and the line where there is one) for what it could not, so one bad
file never ends a run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Union

from longformer_fs.conventions import jsonl_records

from .inputs import wrong_kind
from .pdf_papers import Paper, PdfError, read_paper
from .wikitext import NotAWikiDump, iter_wiki_pages

KINDS = ("txt", "jsonl", "wiki", "pdf")
_SUFFIXES = {"txt": (".txt",), "jsonl": (".jsonl",), "wiki": (".xml", ".xml.bz2", ".xml.gz"), "pdf": (".pdf",)}


@dataclass(frozen=True)
class SourceSpec:
    """One named input: ``--source NAME=KIND:PATH``."""

    name: str
    kind: str
    path: Path
    text_field: str = "text"

    @classmethod
    def parse(cls, text: str) -> "SourceSpec":
        name, sep, rest = text.partition("=")
        kind, sep2, path = rest.partition(":")
        if not sep or not sep2 or not name or kind not in KINDS or not path:
            raise ValueError(f"--source: expected NAME=KIND:PATH with KIND one of {', '.join(KINDS)}, got {text!r}")
        return cls(name, kind, Path(path))

    def files(self) -> list[Path]:
        """The files of this source, sorted (a folder is searched recursively)."""
        if not self.path.exists():
            raise FileNotFoundError(f"--source {self.name}: {self.path} does not exist")
        if self.path.is_file():
            return [self.path]
        return sorted(p for p in self.path.rglob("*") if p.is_file() and p.name.lower().endswith(self.suffixes))

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The file endings this source's kind reads in a folder."""
        return _SUFFIXES[self.kind]


@dataclass
class Document:
    source: str
    title: str
    text: str  # paragraphs separated by newlines
    paper: Paper | None = field(default=None, repr=False)
    origin: str = ""  # file (and line) it came from


@dataclass(frozen=True)
class Skipped:
    source: str
    origin: str
    reason: str


Item = Union[Document, Skipped]


def read_txt(spec: SourceSpec, path: Path) -> Iterator[Item]:
    problem = wrong_kind(path, "text")
    if problem:
        yield Skipped(spec.name, str(path), problem)
        return
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        yield Skipped(spec.name, str(path), f"not UTF-8 text (byte {err.start})")
        return
    except OSError as err:
        yield Skipped(spec.name, str(path), f"unreadable ({err.strerror})")
        return
    yield Document(spec.name, path.stem, text, origin=str(path))


def read_jsonl(spec: SourceSpec, path: Path) -> Iterator[Item]:
    problem = wrong_kind(path, "JSONL")
    if problem:
        yield Skipped(spec.name, str(path), problem)
        return
    for origin, record, problem in jsonl_records(path):
        if problem:
            yield Skipped(spec.name, origin, problem)
            continue
        text = record.get(spec.text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            yield Skipped(spec.name, origin, f"no string field {spec.text_field!r}")
            continue
        title = record.get("title") if isinstance(record.get("title"), str) else ""
        yield Document(spec.name, title, text, origin=origin)


def read_wiki(spec: SourceSpec, path: Path) -> Iterator[Item]:
    problem = wrong_kind(path, "a MediaWiki XML dump", accept=("bzip2-compressed", "gzip-compressed"))
    if problem:
        yield Skipped(spec.name, str(path), problem)
        return
    pages = 0
    try:
        for title, text in iter_wiki_pages(path):
            pages += 1
            yield Document(spec.name, title, text, origin=f"{path}#{title}")
    except NotAWikiDump as err:
        yield Skipped(spec.name, str(path), f"not a MediaWiki XML dump ({err})")
    except (EOFError, ET.ParseError, OSError, zlib.error) as err:
        what = {EOFError: "truncated file", ET.ParseError: "broken XML"}.get(type(err), "broken compression")
        detail = "" if isinstance(err, EOFError) else f"{err}; "
        kept = f"kept the {pages} article(s) read before it" if pages else "before its first article"
        yield Skipped(spec.name, str(path), f"{what} ({detail}{kept})")


def read_pdf(spec: SourceSpec, path: Path) -> Item:
    """One PDF; run in worker processes (extraction is the slow part)."""
    try:
        paper = read_paper(path)
    except PdfError as err:
        return Skipped(spec.name, str(path), str(err))
    text = "\n".join(part for part in (paper.abstract, paper.body) if part)
    return Document(spec.name, paper.title, text, paper=paper, origin=str(path))


READERS = {"txt": read_txt, "jsonl": read_jsonl, "wiki": read_wiki}
