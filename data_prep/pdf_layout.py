"""A PDF's text as lines with their positions, sizes and fonts, in reading order (PDFium).

PDFium (through ``pypdfium2``, BSD-3/Apache-2.0) was chosen by measurement
(``docs/data.md``): it gives every character's box, size and font, as pdfminer.six
does, and infers the spaces and line breaks a typesetter leaves implicit, in C++ (its
plain text is 8 times as fast as pypdf's); what it costs here is asking for each
character from Python. pypdf's text has no layout; PyMuPDF's AGPL does not fit our
license.

What this module adds to PDFium's characters:

- **lines** keep PDFium's line breaks (but not those it makes at a superscript), add
  those it misses, and are cut where a gap wider than :data:`LINE_GAP` ems separates two
  runs (two columns on one baseline, authors set side by side);
- **marks**: a character smaller than its line's text and raised above its baseline (a
  footnote mark, an affiliation letter, a superscript citation) is left out of the line's
  text;
- **line numbers** (``lineno``, review modes, AASTeX): numbers that start or end lines,
  stacked at one horizontal position on a page and counting up down the page, go;
- each line knows its dominant size and font, and the font of its first run, so a
  run-in heading ("**Abstract.** We ...") can be told from running text.

Coordinates are PDF points, y up; a line's ``y`` is its baseline.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

SEGMENT_GAP = 0.8  # ems: a wider gap is a space, even where PDFium put none
LINE_GAP = 2.5  # ems: runs further apart than this are separate lines
MARK_SIZE = 0.85  # a mark is smaller than this fraction of its line's size ...
MARK_RISE = 0.2  # ... and its baseline is raised by this fraction of it, or more
LINE_NUMBER_STACK = 5  # numbers at one x on a page, at least, to be line numbers
_HYPHENS = "-\u00ad\u2010\x02"  # PDFium gives 0x02 for a hyphen it knows ends a line
# Styles by font name: PDFium's weight and ForceBold flag come from font descriptors that
# TeX's Type 1 fonts fill with guesses (CMR10 "weighs" 744), so only the name counts.
_BOLD = re.compile(r"bold|black|heavy|demi|medi(?:um)?\b|cmbx|sfbx|cmb\d|^\w*bx\d|^Lin\w+T[BZ]", re.I)
_ITALIC = re.compile(r"ital|obli|cmti|sfti|cmsl|sfsl|cmmi|^\w*(?:ti|sl)\d{2,4}$|^Lin\w+TB?I", re.I)
_CAPS = re.compile(r"caps|cmcsc|sfcc|smallcap|^\w*csc\d", re.I)


class LayoutError(ValueError):
    """PDFium cannot open the file; the message says why in a few words."""


@dataclass(frozen=True)
class Font:
    """A font's name (subset prefix removed) and the styles its name gives."""

    name: str
    bold: bool
    italic: bool
    caps: bool


@dataclass(frozen=True)
class Line:
    """One line of text as drawn.

    Attributes:
        page: 0-based page number.
        text: the characters, marks left out, spaces as PDFium infers them.
        x0, x1: left and right edges, in points.
        y: the baseline's height, in points (up is positive).
        size: the font size most of its characters have, in points.
        font: the font most of its characters have.
        lead: the line's first run of one font ("Abstract." in "Abstract. We ...").
        lead_font: that run's font.
    """

    page: int
    text: str
    x0: float
    x1: float
    y: float
    size: float
    font: Font
    lead: str
    lead_font: Font

    @property
    def words(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class Document:
    """A PDF's lines in reading order, with what the reader needs of the file besides.

    Attributes:
        lines: every page's lines, page by page, each page in PDFium's reading order.
        pages: per page, its (left, bottom, right, top) box in points.
        metadata_title: the document information's title ("" if none).
    """

    lines: list[Line]
    pages: list[tuple[float, float, float, float]]
    metadata_title: str


_NO_FONT = Font("", False, False, False)


class _Fonts:
    """Font styles by PDFium font handle, read once per font."""

    def __init__(self, raw):
        self.raw = raw
        self.cache: dict[int, Font] = {}
        self.buffer = ctypes.create_string_buffer(256)

    def of(self, text_object) -> Font:
        if not text_object:
            return _NO_FONT
        handle = self.raw.FPDFTextObj_GetFont(text_object)
        key = ctypes.cast(handle, ctypes.c_void_p).value if handle else 0
        font = self.cache.get(key)
        if font is None:
            font = self.cache[key] = self._read(handle) if handle else _NO_FONT
        return font

    def _read(self, handle) -> Font:
        raw = self.raw
        n = raw.FPDFFont_GetBaseFontName(handle, self.buffer, len(self.buffer))
        name = self.buffer.value.decode("latin-1") if n else ""
        name = name.split("+", 1)[1] if re.match(r"^[A-Z]{6}\+", name) else name
        return Font(name, bool(_BOLD.search(name)), bool(_ITALIC.search(name)), bool(_CAPS.search(name)))


@dataclass
class _Char:
    c: str
    x0: float
    x1: float
    y: float
    size: float
    font: Font

    def space_after(self) -> "_Char":
        """A space right after this character: text, no ink, no size."""
        return _Char(" ", self.x1, self.x1, self.y, 0.0, self.font)


def _page_text(raw, textpage, n: int) -> list[int]:
    """Every character's code point, in one call where PDFium's text maps one to one."""
    buffer = ctypes.create_string_buffer(4 * (n + 1))
    written = raw.FPDFText_GetText(textpage, 0, n, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", errors="replace")
    if len(text) == n:
        # GetText writes the hyphen that PDFium knows ends a line as U+FFFE; GetUnicode, as 0x02.
        return [2 if c == "\ufffe" else ord(c) for c in text]
    return [raw.FPDFText_GetUnicode(textpage, i) for i in range(n)]  # characters beyond the BMP, say


def _page_chars(raw, textpage, fonts: _Fonts) -> list[list[_Char]]:
    """PDFium's lines of one page: runs of characters between its line breaks, rotated text left out.

    Size, angle and font belong to a text object, so they are read once per object."""
    n = raw.FPDFText_CountChars(textpage)
    codes = _page_text(raw, textpage, n)
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    ox, oy = ctypes.c_double(), ctypes.c_double()
    matrix = raw.FS_MATRIX()
    lines: list[list[_Char]] = [[]]
    last_object, font, size, upright = None, _NO_FONT, 0.0, True
    broken = False  # PDFium ended a line since the last character
    for i, code in enumerate(codes):
        if code in (10, 13):
            broken = True
            continue
        if code == 32:  # a space, drawn or inferred by PDFium
            if lines[-1] and lines[-1][-1].c != " ":
                lines[-1].append(lines[-1][-1].space_after())
            continue
        if code < 32 and code != 2:
            continue
        text_object = raw.FPDFText_GetTextObject(textpage, i)
        address = ctypes.cast(text_object, ctypes.c_void_p).value if text_object else None
        if address != last_object or address is None:
            last_object, font = address, fonts.of(text_object)
            # As rendered: LaTeX often sets a unit font size and scales it by the matrices.
            raw.FPDFText_GetMatrix(textpage, i, matrix)
            scale = math.sqrt(abs(matrix.a * matrix.d - matrix.b * matrix.c))
            size = raw.FPDFText_GetFontSize(textpage, i) * scale
            upright = matrix.a > 0 and abs(matrix.b) <= 1e-3 * scale
        if not upright:
            continue  # rotated or mirrored: arXiv's identifier up the margin, axis labels
        raw.FPDFText_GetCharBox(textpage, i, left, right, bottom, top)
        raw.FPDFText_GetCharOrigin(textpage, i, ox, oy)
        try:
            char = chr(code)
        except ValueError:
            continue
        last = next((c for c in reversed(lines[-1]) if c.c != " "), None)
        if last is not None:
            em = max(size, last.size)
            dy, dx = abs(oy.value - last.y), ox.value - last.x1
            if broken:
                # PDFium breaks lines at a superscript: what goes on to the right, on about
                # the same baseline, is the same line. (A subscript stacked under a
                # superscript steps back a little.)
                new_line = not (dy < 0.7 * em and -1.5 * em <= dx <= LINE_GAP * em)
            else:
                # ... and misses some breaks: a baseline that moves by most of an em, or a
                # jump far back to the left, starts a line (a mark rises less).
                new_line = dy > 0.7 * em or ox.value < last.x0 - 5 * em
            if new_line:
                lines.append([])
        broken = False
        lines[-1].append(_Char(char, min(left.value, ox.value), max(right.value, left.value), oy.value, size, font))
    return [line for line in lines if any(c.c != " " for c in line)]


def _dominant(chars: list[_Char]) -> tuple[float, Font]:
    sizes, faces = Counter(), Counter()
    for c in chars:
        if c.c != " ":
            sizes[round(c.size, 1)] += 1
            faces[c.font] += 1
    return sizes.most_common(1)[0][0], faces.most_common(1)[0][0]


def _pieces(chars: list[_Char]) -> list[list[_Char]]:
    """A PDFium line cut where a gap wider than :data:`LINE_GAP` ems separates two runs (two
    columns, authors side by side, a line number in the margin), with a space put in a gap of
    more than :data:`SEGMENT_GAP` ems that has none; spaces trimmed."""
    out: list[list[_Char]] = [[]]
    prev = None
    for c in chars:
        if c.c == " ":
            if out[-1] and out[-1][-1].c != " ":
                out[-1].append(c)
            continue
        if prev is not None:
            gap, em = c.x0 - prev.x1, max(c.size, prev.size, 1.0)
            if gap > LINE_GAP * em:
                out.append([])
            elif gap > SEGMENT_GAP * em and out[-1] and out[-1][-1].c != " ":
                out[-1].append(prev.space_after())
        out[-1].append(c)
        prev = c
    return [p for p in (_strip(p) for p in out) if p]


def _strip(chars: list[_Char]) -> list[_Char]:
    while chars and chars[-1].c == " ":
        chars.pop()
    while chars and chars[0].c == " ":
        chars.pop(0)
    return chars


# Spacing accents, and the combining marks they stand for: TeX's OT1 fonts draw an accent
# as a glyph of its own over (or under) its letter, before or after it in the stream.
_ACCENTS = {
    "\u00b4": "\u0301", "`": "\u0300", "\u00a8": "\u0308", "\u02c6": "\u0302", "^": "\u0302", "\u02dc": "\u0303",
    "~": "\u0303", "\u00af": "\u0304", "\u02d8": "\u0306", "\u02d9": "\u0307", "\u02da": "\u030a", "\u02c7": "\u030c",
    "\u00b8": "\u0327", "\u02db": "\u0328", "\u02dd": "\u030b",
}  # fmt: skip


def _place_accents(chars: list[_Char]) -> list[_Char]:
    """Each spacing accent drawn over (or under) a neighbouring letter, put on it ("´" over "a": "á")."""
    out: list[_Char | None] = list(chars)
    for k, c in enumerate(chars):
        if c.c not in _ACCENTS:
            continue
        middle = (c.x0 + c.x1) / 2
        for n in (k + 1, k - 1):
            other = out[n] if 0 <= n < len(out) else None
            if other is None or len(other.c) != 1 or not other.c.isalpha():
                continue
            if other.x0 - 0.5 <= middle <= other.x1 + 0.5:
                combined = unicodedata.normalize("NFC", other.c + _ACCENTS[c.c])
                out[n] = _Char(combined, other.x0, other.x1, other.y, other.size, other.font)
                out[k] = None
                break
    return [c for c in out if c is not None]


def _line(page: int, chars: list[_Char]) -> Line | None:
    chars = _place_accents(chars)
    size, font = _dominant(chars)
    # The baseline most characters share: a mark is raised above it.
    base = Counter(round(c.y, 1) for c in chars if c.c != " " and abs(c.size - size) <= 0.05 * size)
    y = base.most_common(1)[0][0] if base else chars[0].y
    kept = [c for c in chars if c.c == " " or not (c.size < MARK_SIZE * size and c.y - y >= MARK_RISE * size)]
    text = " ".join("".join(c.c for c in kept).split())
    if not text:
        return None
    lead_chars = []
    for c in kept:
        if c.c != " " and lead_chars and c.font != lead_chars[0].font:
            break
        if c.c != " " or lead_chars:
            lead_chars.append(c)
    lead = " ".join("".join(c.c for c in lead_chars).split())
    inked = [c for c in kept if c.c != " "]
    return Line(page, text, min(c.x0 for c in inked), max(c.x1 for c in inked), y, size, font, lead, inked[0].font)


def _edge_word(chars: list[_Char], side: int) -> tuple[list[_Char], list[_Char]]:
    """A run's first (``side`` 0) or last (-1) word, and the rest of the run. A run of one
    word has it as its first word only (a number alone is counted once, as a start)."""
    spaces = [k for k, c in enumerate(chars) if c.c == " "]
    if not spaces:
        return (chars, []) if side == 0 else ([], chars)
    if side == 0:
        return chars[: spaces[0]], _strip(chars[spaces[0] + 1 :])
    return chars[spaces[-1] + 1 :], _strip(chars[: spaces[-1]])


def _edge_number(chars: list[_Char], side: int) -> tuple[int, float, float] | None:
    """The number that starts (``side`` 0) or ends (``side`` -1) a run: (value, left, right)."""
    word, _ = _edge_word(chars, side)
    text = "".join(c.c for c in word)
    if not word or not (text.isdecimal() and len(text) <= 4):  # int() takes these; "①" is a digit, not one
        return None
    return int(text), word[0].x0, word[-1].x1


def _line_numbers(runs: list[list[_Char]]) -> set[tuple[int, int]]:
    """(run, side) of every line number on a page: numbers that start or end runs, stacked
    (left or right aligned) at one x at least :data:`LINE_NUMBER_STACK` times, counting up
    the way the lines go down. A numbered list or a table column does not count up by one."""
    stacks: dict[tuple[int, int, int], list[tuple[float, int, int]]] = defaultdict(list)
    for k, run in enumerate(runs):
        for side in (0, -1):
            found = _edge_number(run, side)
            if found is not None:
                value, left, right = found
                for align, x in ((0, left), (1, right)):
                    stacks[side, align, round(x)].append((-run[0].y, value, k))
    out: set[tuple[int, int]] = set()
    for side, align, x in list(stacks):
        near = sorted({m for d in (-1, 0, 1) for m in stacks.get((side, align, x + d), [])})
        if len(near) < LINE_NUMBER_STACK:
            continue
        values = [v for _, v, _ in near]
        rising = sum(b > a for a, b in itertools.pairwise(values))
        if rising >= 0.8 * (len(values) - 1):
            out.update((k, side) for _, _, k in near)
    return out


def _page_lines(page: int, pdfium_lines: list[list[_Char]]) -> list[Line]:
    """Lines of one page: PDFium's, cut at wide gaps, line numbers left out."""
    pieces = [p for chars in pdfium_lines for p in _pieces(chars)]
    numbers = _line_numbers(pieces)
    lines: list[Line] = []
    for k, chars in enumerate(pieces):
        for side in (-1, 0):
            if (k, side) in numbers:
                _, chars = _edge_word(chars, side)
        if chars and (line := _line(page, chars)) is not None:
            lines.append(line)
    return lines


def read_layout(path: Path) -> Document:
    """Every line of the PDF at ``path``; raises :class:`LayoutError` when PDFium cannot open it."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as err:
        message = str(err)
        if "password" in message.lower():
            raise LayoutError("encrypted (needs a password)") from None
        raise LayoutError(f"unreadable PDF ({message.splitlines()[0][:100] if message else 'PDFium'})") from None
    try:
        fonts = _Fonts(raw)
        lines: list[Line] = []
        boxes = []
        for number in range(len(pdf)):
            page = pdf[number]
            boxes.append(tuple(page.get_bbox()))
            textpage = page.get_textpage()
            try:
                lines.extend(_page_lines(number, _page_chars(raw, textpage, fonts)))
            finally:
                textpage.close()
                page.close()
        try:
            title = (pdf.get_metadata_dict(skip_empty=True) or {}).get("Title", "")
        except Exception:  # a broken information dictionary is no reason to lose the paper
            title = ""
        return Document(lines, boxes, title)
    finally:
        pdf.close()


def is_hyphenated(text: str) -> bool:
    """Whether ``text`` ends in a hyphen after a letter (a word broken at a line end, maybe)."""
    return len(text) >= 2 and text[-1] in _HYPHENS and text[-2].isalpha()
