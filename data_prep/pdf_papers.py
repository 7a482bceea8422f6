"""Research papers in PDF as fields: title, authors, abstract, keywords, body, references.

The reader works on the layout (:mod:`data_prep.pdf_layout`): lines with their size,
font and position, in reading order. In order:

1. **Page furniture** goes: a line among the two highest or lowest of its page that
   recurs on other pages (digits ignored: "Page 3", "Page 4"), a line that is only a page
   number, and a page's outermost line when a wider gap than a line's parts it from the
   text and it is in small type or at the height of another page's (running heads that
   alternate between pages). Line numbers and footnote marks went with the layout.
2. **The title** is the largest text in the upper part of page 1 when it is clearly
   larger than the body text (a running header above it is smaller), or else its first
   bold or small-capital lines (amsart, AASTeX), its lines joined. The PDF's metadata
   title is taken instead when it says the same words (it is cleaner), or when the
   layout has none or only a paper number, and it is not junk ("untitled", a file name).
3. **The abstract** starts at a heading in any of :data:`ABSTRACT_WORDS` (alone on its
   line, run in with a separator or a font of its own: "Abstract.", "Abstract—",
   "ABSTRACT We"), on the first two pages. Without a heading it is the first paragraph
   of prose between the title and the first section, keywords or classification line
   (acmart, REVTeX, AIAA set it so). It ends at a keywords, index terms, CCS, PACS, MSC
   or similar line, at a section heading, or where its font size changes.
4. **The authors** are the lines between the title and the abstract (or the body).
5. **The keywords** follow a keywords line in any of :data:`KEYWORD_WORDS`.
6. **The body** runs from the first section heading after the front matter (numbered,
   or set in bold, capitals or a larger size; or, without one, the first line of body
   text: PRL opens so) to the references heading, or the first of a numbered list "[1]",
   "[2]", ..., or REVTeX's unheaded list in smaller type at the end; an appendix after
   the references is body again. Footnotes (smaller text below a column's last line of
   body text) are left out; paragraphs are one per line of the result; words hyphenated
   across lines are rejoined; compatibility characters (ligatures, full-width forms) are
   normalized.

Each field records how it was found (:data:`FOUND`); an abstract that is not found is
None, with the reason in ``Paper.abstract_missing``.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .pdf_layout import LayoutError, Line, is_hyphenated, read_layout

FOUND = ("metadata", "heading", "layout", "none")  # how a field was found
NO_HEADING_NO_PROSE = "no abstract heading, and no paragraph of prose before the first section"
EMPTY_HEADING = "an abstract heading with no text after it"
TITLE_MIN_RATIO = 1.15  # a title's font is at least this much larger than the body's
TITLE_MAX_CHARS = 300  # a longer run of large text is a banner or a cover page, not a title
FRONT_PAGES = 2  # the abstract and keywords are looked for on this many first pages
PROSE_WORDS = 20  # an abstract without a heading has at least this many words

ABSTRACT_WORDS = (
    "abstract", "summary", "zusammenfassung", "kurzfassung", "résumé", "resume", "resumo", "riassunto",
    "sommario", "resumen", "resum", "samenvatting", "streszczenie", "abstrakt", "sammanfattning",
    "sammendrag", "resumé", "tiivistelmä", "özet", "souhrn", "anotace", "absztrakt", "rezumat",
    "аннотация", "реферат", "анотація", "резюме", "περίληψη", "摘要", "要旨", "概要", "要約", "초록", "요약",
)  # fmt: skip
KEYWORD_WORDS = (
    r"key\s*-?\s*words?(?:\s+and\s+phrases)?", r"additional\s+key\s+words\s+and\s+phrases", r"index\s+terms",
    r"schlüsselwörter", r"schlagwörter", r"stichwörter", r"mots[-\s]cl[ée]s", r"palabras\s+clave",
    r"palavras[-\s]chave", r"parole\s+chiave", r"trefwoorden", r"sleutelwoorden", r"słowa\s+kluczowe",
    r"paraules\s+clau", r"nyckelord", r"klíčová\s+slova", r"anahtar\s+kelimeler", r"ключевые\s+слова",
    r"ключові\s+слова", r"λέξεις[-\s]κλειδιά", r"关键词", r"關鍵詞", r"关键字", r"キーワード", r"주제어", r"핵심어",
)  # fmt: skip
# Lines that close the front matter without being keywords: classification schemes,
# publishers' notes, dates.
OTHER_FRONT_WORDS = (
    r"ccs\s+concepts", r"acm\s+reference\s+format", r"pacs(?:\s+numbers?)?", r"msc(?:\s*\d{4})?",
    r"(?:\d{4}\s+)?mathematics\s+subject\s+classification", r"ams\s+subject\s+classifications?",
    r"subject\s+classification", r"jel(?:\s+classification)?(?:\s+codes?)?", r"nomenclature", r"received",
    r"accepted", r"published", r"doi", r"preprint\s+submitted", r"©", r"copyright", r"article\s+history",
    r"highlights", r"graphical\s+abstract",
)  # fmt: skip
REFERENCE_WORDS = (
    "references", "reference", "bibliography", "literature cited", "works cited", "references and notes",
    "cited literature", "literatur", "literaturverzeichnis", "références", "bibliographie", "referencias",
    "bibliografía", "referências", "referências bibliográficas", "bibliografia", "riferimenti bibliografici",
    "literatuur", "literatuurlijst", "referenser", "litteratur", "kaynaklar", "список литературы",
    "литература", "список використаних джерел", "参考文献", "參考文獻", "참고문헌", "βιβλιογραφία",
)  # fmt: skip

_SEP = r"(?:\s*[:.\u2013\u2014|]|\s+-{1,2}(?=\s)|\s*-{1,2}(?=\s|$))"
_ABSTRACT = re.compile(
    rf"^\s*(?P<word>{'|'.join(map(re.escape, ABSTRACT_WORDS))})(?![^\W\d_])(?P<sep>{_SEP})?\s*(?P<rest>.*?)\s*$",
    re.I,
)
_KEYWORDS = re.compile(rf"^\s*(?:{'|'.join(KEYWORD_WORDS)})(?![^\W\d_])(?P<sep>{_SEP})?\s*(?P<rest>.*?)\s*$", re.I)
_OTHER_FRONT = re.compile(rf"^\s*(?:{'|'.join(OTHER_FRONT_WORDS)})(?:\b|(?=\W)|$)", re.I)
_NUMBERED = re.compile(
    r"^\s*(?P<number>\d{1,2}(?:\.\d{1,2})*\.?|[IVX]{1,5}\.|(?P<letter>[A-Z])\.(?:\d{1,2}\.?)?)\s+(?P<rest>\S.*)$"
)
_APPENDIX = re.compile(r"^\s*(?:[A-Z](?:\.|\s))?\s*(?:appendix|appendices|supplementary|anhang|annexe)\b", re.I)
_PAGE_NUMBER = re.compile(r"^\s*(?:page\s*)?\d+(?:\s*(?:of|/)\s*\d+)?\s*$", re.I)
_SPACED = re.compile(r"^(?:\w ){3,}\w$")  # "A B S T R A C T"
_TRAILING_MARKS = re.compile(r"[\s*∗†‡§¶‖#⋆★]+$")
_LIST_ITEM = re.compile(r"^\s*\[(\d{1,3})\]")
_SENTENCE_END = re.compile(r"[.!?:;。！？]['\")\]]?$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
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
# Unicode's compatibility forms that only change how a character looks: NFKC maps them
# (ligatures, full-width letters, no-break spaces); superscripts, fractions and circled
# numbers keep their meaning only as they are, so they stay.
_SAFE_COMPAT = ("<compat>", "<font>", "<noBreak>", "<wide>", "<narrow>", "<small>", "<initial>", "<medial>",
                "<final>", "<isolated>")  # fmt: skip


_DOTLESS_ACCENTED = re.compile("([ıȷ])([\u0300-\u036f])")


class PdfError(ValueError):
    """The PDF cannot be read (corrupt, encrypted, or without any text)."""


@dataclass(frozen=True)
class Paper:
    """A paper's fields, as plain text.

    Attributes:
        title: the title (None only when the PDF has no text that could be one).
        authors: the author and affiliation lines, one per line, or None.
        abstract: the abstract, or None (``abstract_missing`` says why).
        keywords: the keywords, in order.
        body: the running text from the first section on, one paragraph per line.
        references: the reference list, one line per line of the PDF, or None.
        found: field -> how it was found, one of :data:`FOUND`.
        abstract_missing: why ``abstract`` is None; None when there is one.
    """

    title: str | None
    abstract: str | None
    body: str
    authors: str | None = None
    keywords: list[str] = field(default_factory=list)
    references: str | None = None
    found: dict = field(default_factory=dict)
    abstract_missing: str | None = None

    def record(self) -> dict:
        """The paper as ``papers.jsonl`` holds it."""
        return asdict(self)


def normalize(text: str) -> str:
    """``text`` in NFC, with ligatures and other look-only compatibility forms mapped (NFKC)."""
    text = text.replace("\x02", "-")  # PDFium's hyphen at a line end, where no word was joined
    text = _DOTLESS_ACCENTED.sub(lambda m: {"ı": "i", "ȷ": "j"}[m.group(1)] + m.group(2), text)  # TeX's \'\i
    out = []
    for char in unicodedata.normalize("NFC", text):
        tag = unicodedata.decomposition(char).split(" ", 1)[0]
        if tag in _SAFE_COMPAT:
            mapped = unicodedata.normalize("NFKC", char)
            if not any(unicodedata.combining(c) for c in mapped) and not mapped.startswith(" ") or char == "\u00a0":
                char = mapped
        out.append(char)
    return "".join(out)


def usable_metadata_title(title: object, path: Path) -> str | None:
    """The PDF's metadata title, or None when it is missing or junk (see :data:`_JUNK_TITLE`)."""
    title = " ".join(str(title or "").split())
    if sum(c.isalpha() for c in title) < 3 or _JUNK_TITLE.match(title) or title.lower() == path.stem.lower():
        return None
    return title


def _capitals(text: str) -> bool:
    """All the cased letters are capitals, and there are at least three."""
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    return len(letters) >= 3 and all(c.isupper() for c in letters)


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W\d_]{3,}", text.lower())


def _same_words(a: str, b: str) -> bool:
    x, y = Counter(_words(a)), Counter(_words(b))
    common = sum((x & y).values())
    return bool(common) and 2 * common / (sum(x.values()) + sum(y.values())) >= 0.6


def join_lines(lines: list[str]) -> str:
    """One string from wrapped lines, rejoining words hyphenated at a line end."""
    out = ""
    for line in (x.strip() for x in lines):
        if not line:
            continue
        if out and is_hyphenated(out):
            # "exam-" + "ple": a word broken by the typesetter; "Transformer-" + "XL": a real hyphen.
            out = (out[:-1] if line[0].islower() else out) + line
        else:
            out = f"{out} {line}" if out else line
    return out


def abstract_heading(line: Line | str) -> str | None:
    """The text after an abstract heading on ``line`` ("" if none), or None if it is not one.

    A heading is the word alone, the word and a separator, the word in a font of its own
    (a run-in heading), or the word in capitals run into mixed-case text. "Abstract
    Syntax Notation One" is running text."""
    text, lead = (line, None) if isinstance(line, str) else (line.text, line.lead)
    if _SPACED.match(text.strip()):
        text = text.replace(" ", "")
    match = _ABSTRACT.match(text)
    if match is None:
        return None
    word, rest = match.group("word"), match.group("rest")
    if match.group("sep") or not rest:
        return rest
    if rest[:1].isalnum() and text.lstrip()[: len(word)].isupper() and rest.split()[0] != rest.split()[0].upper():
        return rest
    if lead is not None and lead.strip(" .:").lower() == word.lower() and line.lead_font != line.font:
        return rest
    return None


def _keywords_rest(line: Line) -> str | None:
    match = _KEYWORDS.match(line.text)
    if match is None:
        return None
    rest = match.group("rest")
    if match.group("sep") or not rest or line.lead_font != line.font or line.text.isupper():
        return rest
    return None


class _Paper:
    """The parse of one document's lines; each method finds one field."""

    def __init__(self, lines: list[Line], pages: list[tuple[float, float, float, float]]):
        self.lines = lines
        self.pages = pages
        sizes, fonts = Counter(), Counter()
        self.by_page: dict[int, list[int]] = {}  # page -> its lines' indices
        for i, line in enumerate(lines):
            sizes[round(line.size * 2) / 2] += len(line.text)
            fonts[line.font] += len(line.text)
            self.by_page.setdefault(line.page, []).append(i)
        self.body_size = sizes.most_common(1)[0][0]
        self.body_font = fonts.most_common(1)[0][0]
        self._two_columns: dict[int, bool] = {}
        self.furniture = self._furniture()

    # ------------------------------------------------------------ classification

    def _furniture(self) -> set[int]:
        """Indices of running headers and footers, and of lines that are only a page number."""
        by_page = self.by_page
        edges: dict[int, list[int]] = {}
        keys = Counter()
        for page, indices in by_page.items():
            ordered = sorted(indices, key=lambda i: -self.lines[i].y)
            edges[page] = ordered[:2] + ordered[-2:] if len(ordered) > 4 else ordered
            for key in {self._key(i) for i in edges[page]}:
                keys[key] += 1
        repeated = max(2, -(-len(by_page) // 3))
        out = set()
        for indices in edges.values():
            for i in indices:
                # A title repeated in the running heads is still the title on page 1.
                small = self.lines[i].size <= 1.1 * self.body_size
                if small and keys[self._key(i)] >= repeated or _PAGE_NUMBER.match(self.lines[i].text):
                    out.add(i)
        out |= self._set_apart_edges()
        return out

    def _set_apart_edges(self) -> set[int]:
        """The highest (lowest) lines of a page, on one baseline, when a wider gap than a
        line's parts them from the text and they are in small type or another page has its
        highest (lowest) line at the same height: running heads that alternate between pages
        ("112:2 - Authors", "Title - 112:3"), as a two-page paper has them once each."""
        out = set()
        pitch = {}  # page -> its usual distance between baselines
        for page, indices in self.by_page.items():
            steps = sorted(
                self.lines[a].y - self.lines[b].y
                for a, b in itertools.pairwise(indices)
                if 0 < self.lines[a].y - self.lines[b].y < 3 * self.lines[a].size
            )
            if steps:
                pitch[page] = steps[len(steps) // 2]
        for side in (1, -1):
            edge = {}
            for page, indices in self.by_page.items():
                ordered = sorted(indices, key=lambda i: -side * self.lines[i].y)
                # The edge is every line on the outermost baseline ("14:2" and the authors' names).
                group = [i for i in ordered if abs(self.lines[i].y - self.lines[ordered[0]].y) <= 1.0]
                if len(group) < len(ordered):
                    edge[page] = group, ordered[len(group)]
            for page, (group, inner) in edge.items():
                line, next_line = self.lines[group[0]], self.lines[inner]
                shared = any(q != page and abs(self.lines[g[0]].y - line.y) <= 1.0 for q, (g, _) in edge.items())
                small = all(self.lines[i].size <= 0.9 * self.body_size for i in group)
                gap = abs(line.y - next_line.y)
                apart = gap > 1.6 * max(line.size, next_line.size) and gap > 1.4 * pitch.get(page, 0.0)
                heading = any(_NUMBERED.match(self.lines[i].text) for i in group)  # a page that starts a section
                if (
                    (shared or small)
                    and apart
                    and not heading
                    and all(self.lines[i].size <= 1.1 * self.body_size for i in group)
                ):
                    out.update(group)
        return out

    def _key(self, i: int) -> str:
        return re.sub(r"\d+", "#", self.lines[i].text.lower())

    def styled(self, line: Line) -> bool:
        """Set apart from body text: bold, small capitals, all capitals or a larger size."""
        return line.font.bold or line.font.caps or _capitals(line.text) or line.size >= 1.08 * self.body_size

    def is_heading(self, i: int) -> bool:
        """A section heading: short, not running text, numbered or set apart."""
        line = self.lines[i]
        text = line.text
        if line.words > 12 or len(text) > 120 or text.endswith((",", ";")) or not any(c.isalpha() for c in text):
            return False
        # Small capitals drawn as capitals of a smaller size ("I. INTRODUCTION" in IEEEtran).
        if line.size < (0.75 if _capitals(text) else 0.9) * self.body_size or i in self.furniture:
            return False
        numbered = _NUMBERED.match(text)
        if numbered:
            rest = numbered.group("rest")
            if not (rest[:1].isupper() or not rest[:1].isalpha()) or _LIST_ITEM.match(text):
                return False
            if self.styled(line):
                return True
            # "A. Author and B. Author" is no subsection "A. Method": a lettered heading is set apart.
            if not numbered.group("letter") and line.words <= 6 and not _SENTENCE_END.search(text):
                return True
        if text.endswith(".") and not line.lead_font.bold:
            return False
        return self.styled(line) and line.lead == text and not _PAGE_NUMBER.match(text)

    def closes(self, i: int, font) -> bool:
        """A heading that ends a paragraph set in ``font`` (IEEE sets its abstract in bold:
        a bold line in it is no heading)."""
        return self.is_heading(i) and (self.lines[i].font != font or bool(_NUMBERED.match(self.lines[i].text)))

    def opens_section(self, i: int) -> bool:
        """A line that the front matter cannot run past: a keywords or classification line,
        a numbered heading, or a heading followed by a line of body text (a section starts)."""
        if self.is_stop(i):
            return True
        if not self.is_heading(i):
            return False
        following = next((j for j in range(i + 1, len(self.lines)) if j not in self.furniture), None)
        numbered = _NUMBERED.match(self.lines[i].text)
        if numbered and not numbered.group("letter"):
            return True
        # Body text in the body's own font: an affiliation line under a name is in italics.
        return (
            following is not None and self.is_body_text(following, 8) and self.lines[following].font == self.body_font
        )

    def starts_body(self, i: int, headings: bool = True) -> bool:
        """A section heading (if ``headings``), or a line of body text, that is no front-matter line."""
        if i in self.furniture or self.is_stop(i):
            return False
        return headings and self.is_heading(i) or self.is_body_text(i, words=3)

    def is_stop(self, i: int) -> bool:
        """A line that closes the front matter: keywords, a classification, a publisher's note."""
        line = self.lines[i]
        return _keywords_rest(line) is not None or bool(_OTHER_FRONT.match(line.text))

    # ------------------------------------------------------------ fields

    def title(self) -> tuple[str | None, int]:
        """The title by size, and the index of its last line (-1 when none)."""
        first = [i for i, line in enumerate(self.lines) if line.page == 0 and i not in self.furniture]
        if not first:
            return None, -1
        left, bottom, right, top = self.pages[0]
        upper = [i for i in first if self.lines[i].y >= bottom + 0.35 * (top - bottom)]
        if not upper:
            return None, -1
        worded = [i for i in upper if sum(c.isalpha() for c in self.lines[i].text) >= 2]
        if not worded:
            return None, -1
        largest = max(self.lines[i].size for i in worded)
        if largest >= TITLE_MIN_RATIO * self.body_size:

            def title_sized(i: int) -> bool:
                return abs(self.lines[i].size - largest) <= 0.05 * largest and self.lines[i].page == 0

        else:
            # amsart, AASTeX: the title is bold (or capitals) at the body's size. A running
            # header above it is smaller.
            def title_sized(i: int) -> bool:
                line = self.lines[i]
                return (
                    line.page == 0
                    and line.size >= 0.98 * self.body_size
                    and (line.font.bold or line.font.caps)
                    and line.words <= 25
                )

        start = next((i for i in worded if title_sized(i)), None)
        if start is None:
            return None, -1
        end = start
        while end + 1 < len(self.lines) and title_sized(end + 1):
            end += 1
        title = _TRAILING_MARKS.sub("", join_lines([self.lines[i].text for i in range(start, end + 1)]))
        if sum(c.isalpha() for c in title) < 3 or len(title) > TITLE_MAX_CHARS:
            return None, -1  # a drop cap, a logo's letters, a banner
        return title, end

    def front(self) -> list[int]:
        """Indices of the lines on the first pages, furniture left out."""
        return [i for i, line in enumerate(self.lines) if line.page < FRONT_PAGES and i not in self.furniture]

    def abstract_by_heading(self, after: int) -> tuple[str | None, int, int] | None:
        """(abstract, heading index, index past its end), or None without a heading."""
        for i in self.front():
            if i <= after:
                continue
            rest = abstract_heading(self.lines[i])
            if rest is None:
                continue
            end = self._abstract_end(i, rest)
            text = join_lines(([rest] if rest else []) + self._texts(i + 1, end))
            return (text or None), i, end
        return None

    def _abstract_end(self, heading: int, rest: str) -> int:
        """Index past the abstract under the heading line ``heading``; ``rest`` is that line's
        text after the heading word, the abstract's first words when it is run in. The
        abstract keeps the size and font of its first line."""
        first = self.lines[heading] if rest else self.lines[heading + 1] if heading + 1 < len(self.lines) else None
        size = first.size if first else self.body_size
        font = first.font if first else None
        prev = self.lines[heading] if rest else None
        j = heading + 1
        while j < len(self.lines):
            line = self.lines[j]
            if j in self.furniture:
                j += 1
                continue
            if self.is_stop(j) or self.closes(j, font) or abstract_heading(line) is not None:
                break
            if abs(line.size - size) > 0.1 * size or line.page >= FRONT_PAGES:
                break
            if prev is not None and line.page == prev.page and prev.y - line.y > 2.6 * size:
                break
            prev = line
            j += 1
        return j

    def _texts(self, start: int, end: int) -> list[str]:
        return [self.lines[j].text for j in range(start, end) if j not in self.furniture]

    def abstract_by_layout(self, after: int, before: int) -> tuple[str, int, int] | None:
        """The first block of prose in ``(after, before)`` on the first pages, as (text, start, end)."""
        candidates = [i for i in self.front() if after < i < before]
        blocks: list[list[int]] = []
        for i in candidates:
            line = self.lines[i]
            if blocks:
                prev = self.lines[blocks[-1][-1]]
                # One block: the next line down, in the same type, without a paragraph's gap
                # (an abstract's list items and short lines stay in it).
                same = (
                    i == blocks[-1][-1] + 1
                    and abs(line.size - prev.size) <= 0.06 * prev.size
                    and line.page == prev.page
                    and 0 < prev.y - line.y <= 1.6 * prev.size
                )
                if same:
                    blocks[-1].append(i)
                    continue
            blocks.append([i])
        for block in blocks:
            text = join_lines([self.lines[i].text for i in block])
            words = text.split()
            wordish = len(words) + len(_CJK.findall(text)) / 2
            lower = sum(w[:1].islower() for w in words) / max(1, len(words))
            prose = (lower >= 0.4 and "." in text) or _CJK.search(text)
            if len(block) >= 2 and wordish >= PROSE_WORDS and prose and text.count("@") <= 1:
                return text, block[0], block[-1] + 1
        return None

    def keywords(self) -> tuple[list[str], range]:
        """The keywords, and the indices of their lines (empty when none)."""
        for i, line in enumerate(self.lines):
            if line.page >= FRONT_PAGES or i in self.furniture:
                continue
            rest = _keywords_rest(line)
            if rest is None:
                continue
            parts, j = ([rest] if rest else []), i + 1
            size = line.size if rest else None  # a heading alone sets no size: its first line does
            while j < len(self.lines) and self.lines[j].page == line.page:
                if parts and parts[-1].endswith("."):
                    break  # "Key words and phrases. a, b, c." ends where its sentence does
                nxt = self.lines[j]
                size = size or nxt.size
                if self.is_stop(j) or self.closes(j, line.font) or abs(nxt.size - size) > 0.1 * size:
                    break
                # Under a heading of its own (sigconf's KEYWORDS, achemso's Keywords) the first line may sit lower.
                if self.lines[j - 1].y - nxt.y > (1.9 if parts else 3.5) * nxt.size or nxt.words > 25:
                    break
                parts.append(nxt.text)
                j += 1
            words = [w.strip(" .") for w in re.split(r"\s*[,;·•]\s*|\s+[\u2014\u2013]\s+", join_lines(parts))]
            return [w for w in words if w], range(i, j)
        return [], range(0)

    def references_start(self, after: int) -> tuple[int | None, str]:
        """Index of the references heading (or first list item) after ``after``, and how it was found."""
        for i in range(len(self.lines) - 1, after, -1):
            text = self.lines[i].text
            numbered = _NUMBERED.match(text)
            name = (numbered.group("rest") if numbered else text).strip(" .:").lower()
            if name in REFERENCE_WORDS and self.lines[i].words <= 5:
                return i, "heading"
        items = [i for i in range(after + 1, len(self.lines)) if _LIST_ITEM.match(self.lines[i].text)]
        for k, i in enumerate(items):
            if _LIST_ITEM.match(self.lines[i].text).group(1) == "1":
                later = {_LIST_ITEM.match(self.lines[j].text).group(1) for j in items[k + 1 :]}
                if {"2", "3"} <= later:
                    # REVTeX sets the authors' notes (e-mail addresses) in the list, before [1].
                    while i - 1 > after and self.smaller(self.lines[i - 1]) and not self.is_heading(i - 1):
                        i -= 1
                    return i, "layout"
        # REVTeX's lists have no heading and numbers as marks: the smaller type after the
        # last line of body text, when it runs to the end.
        rest = [i for i in range(after + 1, len(self.lines)) if i not in self.furniture]
        last_body = max((i for i in rest if self.is_body_text(i, words=1)), default=None)
        tail = [i for i in rest if last_body is not None and i > last_body]
        if len(tail) >= 3 and all(self.smaller(self.lines[i]) for i in tail):
            return tail[0], "layout"
        return None, "none"

    def body_sized(self, line: Line) -> bool:
        """In the body text's size (within 6%)."""
        return abs(line.size - self.body_size) <= 0.06 * self.body_size

    def smaller(self, line: Line) -> bool:
        """In type smaller than the body's: footnotes, reference lists."""
        return line.size < 0.94 * self.body_size

    def is_body_text(self, i: int, words: int = 4) -> bool:
        return self.body_sized(self.lines[i]) and self.lines[i].words >= words

    def footnotes(self, indices: list[int]) -> set[int]:
        """Among ``indices``, the lines below the last line of body text in their column, in smaller type."""
        lowest: dict[tuple[int, str], float] = {}
        for i in indices:
            line = self.lines[i]
            if self.body_sized(line):
                key = (line.page, self._column(line))
                lowest[key] = min(lowest.get(key, line.y), line.y)
        out = set()
        for i in indices:
            line = self.lines[i]
            floor = lowest.get((line.page, self._column(line)))
            if floor is not None and line.y < floor - 0.5 and self.smaller(line):
                out.add(i)
        return out

    def _column(self, line: Line) -> str:
        """The column a line is in: "left", "right" or "full" on a page set in two columns
        (both halves hold lines of body text), "full" on any other page."""
        left, _, right, _ = self.pages[line.page]
        middle, slack = (left + right) / 2, 0.05 * (right - left)
        if line.page not in self._two_columns:
            others = (self.lines[i] for i in self.by_page[line.page])
            halves = Counter(
                "left" if other.x1 <= middle + slack else "right" if other.x0 >= middle - slack else "full"
                for other in others
                if self.body_sized(other)
            )
            self._two_columns[line.page] = halves["left"] >= 3 and halves["right"] >= 3
        if not self._two_columns[line.page]:
            return "full"
        if line.x1 <= middle + slack:
            return "left"
        if line.x0 >= middle - slack:
            return "right"
        return "full"

    def paragraphs(self, indices: list[int]) -> str:
        """The lines at ``indices`` as paragraphs, one per line of the result."""
        paragraphs: list[list[str]] = []
        prev: Line | None = None
        prev_heading = False
        margin: dict[tuple[int, str], float] = {}
        for i in indices:
            line = self.lines[i]
            key = (line.page, self._column(line))
            margin[key] = min(margin.get(key, line.x0), line.x0)
        for i in indices:
            line = self.lines[i]
            heading = self.is_heading(i)
            left = margin[(line.page, self._column(line))]
            indented = 0.7 * line.size < line.x0 - left < 6 * line.size
            gap = prev is not None and line.page == prev.page and prev.y - line.y > 1.9 * max(line.size, prev.size)
            if prev is None or heading or prev_heading or indented or gap:
                paragraphs.append([])
            paragraphs[-1].append(line.text)
            prev, prev_heading = line, heading
        return "\n".join(normalize(join_lines(p)) for p in paragraphs if p)


def parse(lines: list[Line], pages: list, metadata_title: str, path: Path) -> Paper:
    """A paper's fields from its layout (:func:`data_prep.pdf_layout.read_layout`)."""
    doc = _Paper(lines, pages)
    found: dict[str, str] = {}
    title, title_end = doc.title()
    meta = usable_metadata_title(metadata_title, path)
    # The metadata's title when it says the layout's, or the layout found none (or a paper
    # number, "IMECE2023-XXXX"): metadata is cleaner, and often stale when it disagrees.
    if meta is not None and (title is None or len(_words(title)) < 3 or _same_words(meta, title)):
        title, found["title"] = meta, "metadata"
    elif title is not None:
        found["title"] = "layout"
    else:
        first = next((i for i in range(len(lines)) if i not in doc.furniture), 0)
        title, title_end, found["title"] = lines[first].text, first, "layout"
    after_title = title_end

    missing = None
    heading = doc.abstract_by_heading(after_title)
    keywords, keyword_lines = doc.keywords()
    if heading is not None:
        abstract, abstract_start, front_end = heading
        found["abstract"] = "heading" if abstract else "none"
        missing = None if abstract else EMPTY_HEADING
    else:
        first_section = next((i for i in range(after_title + 1, len(lines)) if doc.opens_section(i)), len(lines))
        by_layout = doc.abstract_by_layout(after_title, first_section)
        if by_layout is not None:
            abstract, abstract_start, front_end = by_layout
            found["abstract"] = "layout"
        else:
            abstract, abstract_start, front_end = None, None, after_title + 1
            found["abstract"], missing = "none", NO_HEADING_NO_PROSE
    found["keywords"] = "heading" if keywords else "none"

    # The body starts at the first heading after the front matter, or at its first line
    # of body text where none comes first (a letter, PRL's opening paragraphs). Keywords,
    # and blocks under a front-matter heading of their own (Nomenclature, CCS CONCEPTS),
    # are passed over.
    body_start, in_front_block = None, False
    for i in range(front_end, len(lines)):
        if i in keyword_lines or i in doc.furniture:
            continue
        if doc.is_stop(i):
            in_front_block = (
                in_front_block or doc.is_heading(i) or _OTHER_FRONT.fullmatch(lines[i].text.strip(" :.")) is not None
            )
            continue
        if doc.opens_section(i) or not in_front_block and doc.starts_body(i, headings=False):
            body_start = i
            break
    if body_start is None:  # a page of notes: whatever follows the front matter
        body_start = next((i for i in range(front_end, len(lines)) if i not in doc.furniture), len(lines))
    found["body"] = "heading" if body_start < len(lines) and doc.is_heading(body_start) else "layout"
    authors_end = abstract_start if abstract_start is not None else body_start
    authors = [
        lines[i].text
        for i in range(after_title + 1, authors_end)
        if i not in doc.furniture and lines[i].page == lines[max(after_title, 0)].page
    ]
    found["authors"] = "layout" if authors else "none"

    refs_start, found["references"] = doc.references_start(body_start)
    body_indices = list(range(body_start, refs_start if refs_start is not None else len(lines)))
    references: list[int] = []
    if refs_start is not None:
        tail = range(refs_start + 1, len(lines))
        appendix = next((i for i in tail if _APPENDIX.match(lines[i].text) and doc.is_heading(i)), None)
        first = refs_start + 1 if found["references"] == "heading" else refs_start  # a list starts at its item
        references = list(range(first, appendix if appendix is not None else len(lines)))
        if appendix is not None:
            body_indices += list(range(appendix, len(lines)))
    body_indices = [i for i in body_indices if i not in doc.furniture]
    footnotes = doc.footnotes(body_indices)
    body = doc.paragraphs([i for i in body_indices if i not in footnotes])
    reference_text = "\n".join(normalize(lines[i].text) for i in references if i not in doc.furniture) or None
    return Paper(
        title=normalize(title) if title else None,
        abstract=normalize(abstract) if abstract else None,
        body=body,
        authors="\n".join(normalize(a) for a in authors) or None,
        keywords=[normalize(k) for k in keywords],
        references=reference_text,
        found=found,
        abstract_missing=missing,
    )


def read_paper(path: Path) -> Paper:
    """Extract one paper; raises :class:`PdfError` with the reason when it cannot."""
    path = Path(path)
    try:
        layout = read_layout(path)
    except LayoutError as err:
        raise PdfError(str(err)) from None
    except Exception as err:  # PDFium and pypdfium2 raise many types on damaged files; one paper must not end the run
        raise PdfError(f"unreadable PDF ({type(err).__name__})") from None
    if not layout.lines:
        raise PdfError("no extractable text (scanned images?)")
    return parse(layout.lines, layout.pages, layout.metadata_title, path)
