"""Research papers in PDF as ``{title, abstract, body}`` (pypdf, no Java server).

Text comes out of pypdf one page at a time; then, in order:

- running headers and footers go: a line that starts or ends at least half of the
  pages (digits ignored, so "Page 3" and "Page 4" match) is page furniture, as is a
  line that is only a page number;
- words hyphenated across lines are rejoined ("exam-" + "ple" -> "example"), but a
  hyphen before a capital or a digit stays ("Transformer-" + "XL" -> "Transformer-XL");
- the abstract runs from an "Abstract" heading to the first introduction heading
  ("1 Introduction", "I. INTRODUCTION", "Introduction", any case); the body starts at
  that heading. A heading is "Abstract" alone on its line (any case; a colon, period or
  dash may follow), or "Abstract" and a separator (":", ".", an en or em dash, " - ")
  starting a paragraph ("Abstract\u2014We ...", "Abstract. We ..."), or "ABSTRACT" in
  capitals before a mixed-case word ("ABSTRACT We ..."). "Abstract" followed by a word,
  as in "Abstract Syntax Notation One" or "Abstracts of ...", is running text.

The title is the PDF's metadata title unless that is junk (empty, "untitled", a file
name, "Microsoft Word - draft.doc"). Else it is the largest text in the top half of
page 1, consecutive lines of that size joined (a two-line title is one title), sizes
measured as rendered: the font size times the scale of the text and transformation
matrices, as LaTeX output often sets a unit font size and scales by the matrix. A
running header above the title is smaller, so it is never taken. A page 1 without
text clearly larger than its body text falls back to its first line.

A paper without an "Abstract" heading keeps ``abstract = None`` and its whole text
as the body: callers report it, they do not fail.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pypdf import PageObject, PdfReader
from pypdf.errors import PdfReadError

_PAGE_NUMBER = re.compile(r"^\s*(page\s*)?\d+(\s*(of|/)\s*\d+)?\s*$", re.I)
# "Abstract", then either nothing or a separator and the abstract's first words. A hyphen
# counts only before a space: "Abstract-based methods" is running text.
_ABSTRACT = re.compile(r"^\s*abstract(?:\s*(?P<sep>[:.\u2013\u2014]|-{1,2}(?=\s|$)))?\s*(?P<rest>.*?)\s*$", re.I)
_INTRO = re.compile(r"^\s*(?:(?:\d+|[ivxlc]+)\s*[.):]?\s+)?introduction\s*$", re.I)
_HYPHEN_END = re.compile(r"[A-Za-z]-$")
# Metadata titles that name no paper: placeholders, a word processor's "App - file.doc",
# a file name or a path.
_JUNK_TITLE = re.compile(
    r"""^(?:
        untitled.* | no\ title | title | document\s*\d* | slide\s*\d*
      | microsoft\ \w+\ -\ .*
      | .*\.(?:docx?|rtf|odt|pdf|tex|dvi|e?ps|txt|pptx?|indd)
      | \S*[/\\]\S*
    )$""",
    re.I | re.X,
)
TITLE_MIN_RATIO = 1.15  # a title's font is at least this much larger than the body's
TITLE_MAX_CHARS = 300  # a longer run of large text is a banner or a cover page, not a title


class PdfError(ValueError):
    """The PDF cannot be read (corrupt, encrypted, or without any text)."""


@dataclass(frozen=True)
class Paper:
    title: str
    abstract: str | None
    body: str


def _abstract_heading(line: str) -> str | None:
    """The text after an "Abstract" heading on ``line`` ("" if none), or None if it is not one."""
    match = _ABSTRACT.match(line)
    if match is None:
        return None
    rest = match.group("rest")
    # An upper-case heading run into mixed-case text ("ABSTRACT We ...") needs no separator.
    set_off = line.lstrip().startswith("ABSTRACT") and rest[:1].isupper() and not rest.split()[0].isupper()
    return rest if match.group("sep") or not rest or set_off else None


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


def _without_title(lines: list[str], title: str, within: int = 10) -> list[str]:
    """``lines`` less the consecutive lines, among the first ``within``, that spell ``title``."""
    want = " ".join(title.split())
    for i in range(min(len(lines), within)):
        joined = ""
        for j in range(i, len(lines)):
            joined = f"{joined} {' '.join(lines[j].split())}".strip()
            if joined == want:
                return lines[:i] + lines[j + 1 :]
            if not want.startswith(joined):
                break
    return lines


def split_paper(lines: list[str], title: str) -> Paper:
    """Title, abstract and body from a paper's cleaned lines, in reading order."""
    start = next((i for i, line in enumerate(lines) if _abstract_heading(line) is not None), None)
    intro = next((i for i, line in enumerate(lines) if _INTRO.match(line) and (start is None or i > start)), None)
    if start is None:
        body_lines = lines[intro:] if intro is not None else _without_title(lines, title)
        return Paper(title, None, join_lines(body_lines))
    rest = _abstract_heading(lines[start])
    end = intro if intro is not None else len(lines)
    abstract = join_lines(([rest] if rest else []) + lines[start + 1 : end])
    body = join_lines(lines[end:]) if intro is not None else ""
    return Paper(title, abstract or None, body)


@dataclass(frozen=True)
class TextLine:
    """A line of text as drawn on a page.

    Attributes:
        text: the line's characters.
        size: its largest rendered font size, in points.
        y: its baseline's height on the page, in points (PDF user space: up is positive).
    """

    text: str
    size: float
    y: float


def _multiply(a: list[float], b: list[float]) -> list[float]:
    """The product of two PDF matrices ``[a b c d e f]`` (affine maps, row-vector convention)."""
    return [
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
        a[4] * b[0] + a[5] * b[2] + b[4],
        a[4] * b[1] + a[5] * b[3] + b[5],
    ]


def extract_lines(page: PageObject) -> tuple[str, list[TextLine]]:
    """A page's text (as ``page.extract_text()`` gives it) and its horizontal lines with sizes.

    Rotated text (arXiv's identifier in the margin, axis labels) is left out of the lines.
    """
    lines: list[TextLine] = []
    parts: list[tuple[str, float, float]] = []  # the current line: (text, size, y)

    def close_line() -> None:
        text = " ".join("".join(p[0] for p in parts).split())
        if text:
            lines.append(TextLine(text, max(p[1] for p in parts), parts[0][2]))
        parts.clear()

    def visit(text: str, cm: list, tm: list, font: object, font_size: float) -> None:
        m = _multiply([float(x) for x in tm], [float(x) for x in cm])
        scale = math.sqrt(abs(m[0] * m[3] - m[1] * m[2]))
        if not (m[0] > 0 and abs(m[1]) <= 1e-3 * scale):
            return  # rotated or mirrored
        size, y = font_size * scale, m[5]
        for i, chunk in enumerate(text.split("\n")):
            if i:
                close_line()
            if not chunk.strip():
                if chunk and parts:
                    parts.append((chunk, 0.0, parts[0][2]))  # a space between words: text, no size
                continue
            # pypdf marks most line breaks with "\n"; a baseline that moves by more than half
            # the larger font is one it did not mark. A superscript moves less.
            if parts and abs(y - parts[0][2]) > 0.5 * max(size, *(p[1] for p in parts)):
                close_line()
            parts.append((chunk, size, y))

    text = page.extract_text(visitor_text=visit) or ""
    close_line()
    return text, lines


def title_by_size(lines: list[TextLine], bottom: float, top: float) -> str | None:
    """The title of page 1: its largest text in the top half, if clearly larger than the body.

    Args:
        lines: page 1's lines, in content order (:func:`extract_lines`).
        bottom, top: the page's vertical extent, in points.

    Returns:
        The consecutive lines of the largest size joined by spaces, or None when no text
        there is at least :data:`TITLE_MIN_RATIO` times the size of most of the page's
        characters (then the caller falls back to the first line).
    """
    if not lines:
        return None
    characters = Counter()
    for line in lines:
        characters[round(line.size, 1)] += len(line.text)
    body = characters.most_common(1)[0][0]
    upper = [i for i, line in enumerate(lines) if line.y >= (bottom + top) / 2]
    if not upper:
        return None
    largest = max(lines[i].size for i in upper)
    if largest < TITLE_MIN_RATIO * body:
        return None

    def title_sized(line: TextLine) -> bool:
        return abs(line.size - largest) <= 0.05 * largest

    first = next(i for i in upper if title_sized(lines[i]))
    run = [lines[first].text]
    for line in lines[first + 1 :]:
        if not title_sized(line):
            break
        run.append(line.text)
    title = " ".join(run)
    if sum(c.isalpha() for c in title) < 3 or len(title) > TITLE_MAX_CHARS:
        return None  # a drop cap, a logo's letters, a banner
    return title


def usable_metadata_title(title: object, path: Path) -> str | None:
    """The PDF's metadata title, or None when it is missing or junk (see :data:`_JUNK_TITLE`)."""
    title = " ".join(str(title or "").split())
    if sum(c.isalpha() for c in title) < 3 or _JUNK_TITLE.match(title) or title.lower() == path.stem.lower():
        return None
    return title


def read_paper(path: Path) -> Paper:
    """Extract one paper; raises :class:`PdfError` with the reason when it cannot."""
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise PdfError("encrypted (needs a password)")
        first_text, first_lines = extract_lines(reader.pages[0]) if len(reader.pages) else ("", [])
        pages = [first_text.splitlines()] + [(page.extract_text() or "").splitlines() for page in reader.pages[1:]]
        box = reader.pages[0].mediabox if len(reader.pages) else None
        title = usable_metadata_title(reader.metadata.title if reader.metadata else None, Path(path))
        if title is None and box is not None:
            title = title_by_size(first_lines, float(box.bottom), float(box.top))
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
    return split_paper(lines, title or " ".join(lines[0].split()))
