"""Research papers in PDF as ``{title, abstract, body}`` (pypdf, no Java server).

Text comes out of pypdf one page at a time; then, in order:

- running headers and footers go: a line that starts or ends at least half of the
  pages (digits ignored, so "Page 3" and "Page 4" match) is page furniture, as is a
  line that is only a page number;
- words hyphenated across lines are rejoined ("exam-" + "ple" -> "example"), but a
  hyphen before a capital or a digit stays ("Transformer-" + "XL" -> "Transformer-XL");
- the abstract runs from an "Abstract" heading (alone on its line, or "Abstract—We ...")
  to the first introduction heading ("1 Introduction", "I. INTRODUCTION",
  "Introduction", any case); the body starts at that heading.

A paper without an "Abstract" heading keeps ``abstract = None`` and its whole text
as the body: callers report it, they do not fail.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pypdf import PdfReader
from pypdf.errors import PdfReadError

_PAGE_NUMBER = re.compile(r"^\s*(page\s*)?\d+(\s*(of|/)\s*\d+)?\s*$", re.I)
_ABSTRACT = re.compile(r"^\s*abstract\s*(?:[-\u2013\u2014:.]\s*)?(?P<rest>.*)$", re.I)
_INTRO = re.compile(r"^\s*(?:(?:\d+|[ivxlc]+)\s*[.):]?\s+)?introduction\s*$", re.I)
_HYPHEN_END = re.compile(r"[A-Za-z]-$")


class PdfError(ValueError):
    """The PDF cannot be read (corrupt, encrypted, or without any text)."""


@dataclass(frozen=True)
class Paper:
    title: str
    abstract: str | None
    body: str


def _furniture_key(line: str) -> str:
    return re.sub(r"\d+", "#", " ".join(line.split()).lower())


def drop_page_furniture(pages: list[list[str]]) -> list[list[str]]:
    """Remove running headers/footers and page numbers from each page's lines."""
    pages = [[line for line in page if line.strip()] for page in pages]
    edges = Counter()
    for page in pages:
        for line in {_furniture_key(x) for x in page[:2] + page[-2:]}:
            edges[line] += 1
    repeated = {key for key, n in edges.items() if len(pages) >= 2 and n >= max(2, (len(pages) + 1) // 2)}
    cleaned = []
    for page in pages:
        keep = []
        for i, line in enumerate(page):
            at_edge = i < 2 or i >= len(page) - 2
            if _PAGE_NUMBER.match(line) or (at_edge and _furniture_key(line) in repeated):
                continue
            keep.append(line)
        cleaned.append(keep)
    return cleaned


def join_lines(lines: list[str]) -> str:
    """One string from wrapped lines, rejoining words hyphenated at a line end."""
    out = ""
    for line in (x.strip() for x in lines):
        if not line:
            continue
        if out and _HYPHEN_END.search(out):
            # "exam-" + "ple": a word broken by the typesetter; "Transformer-" + "XL": a real hyphen.
            out = (out[:-1] if line[0].islower() else out) + line
        else:
            out = f"{out} {line}" if out else line
    return out


def split_paper(lines: list[str], title: str) -> Paper:
    """Title, abstract and body from a paper's cleaned lines, in reading order."""
    start = next((i for i, line in enumerate(lines) if _ABSTRACT.match(line)), None)
    intro = next((i for i, line in enumerate(lines) if _INTRO.match(line) and (start is None or i > start)), None)
    if start is None:
        body_lines = lines[intro:] if intro is not None else lines
        if intro is None and lines and lines[0].strip() == title:
            body_lines = lines[1:]
        return Paper(title, None, join_lines(body_lines))
    rest = _ABSTRACT.match(lines[start]).group("rest")
    end = intro if intro is not None else len(lines)
    abstract = join_lines(([rest] if rest else []) + lines[start + 1 : end])
    body = join_lines(lines[end:]) if intro is not None else ""
    return Paper(title, abstract or None, body)


def read_paper(path: Path) -> Paper:
    """Extract one paper; raises :class:`PdfError` with the reason when it cannot."""
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise PdfError("encrypted (needs a password)")
        pages = [(page.extract_text() or "").splitlines() for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
    except PdfError:
        raise
    except (PdfReadError, OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        detail = str(err).splitlines()[0][:100] if str(err) else ""
        raise PdfError(f"unreadable PDF ({type(err).__name__}: {detail})") from None
    except Exception as err:  # pypdf raises many types on damaged files; one bad paper must not end the run
        raise PdfError(f"unreadable PDF ({type(err).__name__})") from None
    pages = drop_page_furniture(pages)
    lines = [line for page in pages for line in page]
    if not lines:
        raise PdfError("no extractable text (scanned images?)")
    title = " ".join(meta_title.split()) or " ".join(lines[0].split())
    return split_paper(lines, title)
