"""The truth about the PDF paper fixtures in ``tests/data_prep/papers/``, read from their .tex.

Dependency-free (standard library only), so that a test can compare what a PDF reader extracts
from ``NAME.pdf`` with what ``NAME.tex`` says: :func:`truth` returns the title, abstract,
keywords, author names, first section heading and babel language as plain text, and
:func:`bag_f1` scores an extracted text against the truth as a bag of words.

The parser knows only the constructs the fixtures use (see ``papers/README.md``): ``\\title``,
``\\author`` (with ``\\and``, ``\\IEEEauthorblockN``, ``\\Name``), the ``abstract``
environment or an ``\\abstracttext`` macro, ``\\keywords{}`` and the ``keyword``,
``keywords`` and ``IEEEkeywords`` environments, ``\\section`` and babel's options.

Run ``python tests/tex_truth.py`` to print the truth of every fixture.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

PAPERS_DIR = Path(__file__).resolve().parent / "papers"

# Commands whose (optional and braced) arguments are dropped along with the command.
_DROP_WITH_ARG = (
    "thanks",
    "footnote",
    "titlenote",
    "tnoteref",
    "fnref",
    "corref",
    "cite",
    "citep",
    "citet",
    "citealp",
    "nocite",
    "ref",
    "eqref",
    "pageref",
    "label",
    "inst",
    "IEEEmembership",
    "orcidID",
    "orcidlink",
    "email",
    "Email",
    "keywords",
    "index",
    "hspace",
    "vspace",
    "thanksibid",
    "textsuperscript",
    "footnotemark",
)

_COMBINING = {
    '"': "\u0308",
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    "~": "\u0303",
    "=": "\u0304",
    ".": "\u0307",
    "c": "\u0327",
    "v": "\u030c",
    "u": "\u0306",
    "H": "\u030b",
    "k": "\u0328",
    "r": "\u030a",
    "d": "\u0323",
    "b": "\u0331",
}

_LETTERS = {
    "ss": "ß",
    "o": "ø",
    "O": "Ø",
    "ae": "æ",
    "AE": "Æ",
    "oe": "œ",
    "OE": "Œ",
    "aa": "å",
    "AA": "Å",
    "l": "ł",
    "L": "Ł",
    "i": "ı",
    "j": "ȷ",
}

_SYMBOLS = {
    "ldots": "…",
    "dots": "…",
    "textendash": "–",
    "textemdash": "—",
    "LaTeX": "LaTeX",
    "TeX": "TeX",
    "copyright": "©",
    "textregistered": "®",
    "texttrademark": "™",
    "arcdeg": "°",
    "textdegree": "°",
    "S": "§",
    "P": "¶",
    "pounds": "£",
    "euro": "€",
    "guillemotleft": "«",
    "guillemotright": "»",
    "quad": " ",
    "qquad": " ",
    "newline": " ",
    "linebreak": " ",
    "par": " ",
    "and": " ",
    "AND": " ",
    "titlebreak": " ",
}


# --------------------------------------------------------------------------------------------
# Low-level scanning
# --------------------------------------------------------------------------------------------


def strip_comments(text: str) -> str:
    """Remove ``%`` comments (an unescaped ``%`` to the end of its line, with the newline)."""
    return re.sub(r"(?<!\\)%[^\n]*\n?", "", text)


def _group_end(text: str, start: int, open_ch: str = "{", close_ch: str = "}") -> int:
    """Index just past the group opened at ``text[start] == open_ch``; escaped braces skipped."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {open_ch}{close_ch} group at offset {start}")


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n":
        i += 1
    return i


def command_args(text: str, name: str) -> list[tuple[int, int, str]]:
    """Every ``\\name[opt]...{arg}`` in ``text``: (start, end, arg). Optional args are skipped;
    an occurrence without a braced argument (``\\newcommand{\\name}``) is not returned."""
    found = []
    for match in re.finditer(r"\\" + re.escape(name) + r"(?![A-Za-z@])\*?", text):
        i = _skip_space(text, match.end())
        while i < len(text) and text[i] == "[":
            i = _skip_space(text, _group_end(text, i, "[", "]"))
        if i < len(text) and text[i] == "{":
            end = _group_end(text, i)
            found.append((match.start(), end, text[i + 1 : end - 1]))
    return found


def first_arg(text: str, name: str) -> str | None:
    args = command_args(text, name)
    return args[0][2] if args else None


def environment(text: str, name: str) -> str | None:
    """The body of the first ``\\begin{name}...\\end{name}``."""
    match = re.search(r"\\begin\{" + re.escape(name) + r"\}(.*?)\\end\{" + re.escape(name) + r"\}", text, re.S)
    return match.group(1) if match else None


def drop_commands(text: str, names=_DROP_WITH_ARG) -> str:
    """Remove each ``\\name[opt]{arg}`` (and a bare ``\\name`` without argument) from ``text``."""
    for name in names:
        while True:
            args = command_args(text, name)
            if not args:
                break
            start, end, _ = args[-1]
            text = text[:start] + text[end:]
        text = re.sub(r"\\" + re.escape(name) + r"(?![A-Za-z@])\*?", "", text)
    return text


# --------------------------------------------------------------------------------------------
# LaTeX to plain text
# --------------------------------------------------------------------------------------------


def _compose(accent: str, base: str) -> str:
    if base.startswith("\\"):
        base = {"\\i": "i", "\\j": "j"}.get(base, base[1:])
    return unicodedata.normalize("NFC", base + _COMBINING[accent])


def latex_to_text(text: str) -> str:
    """Plain text of a LaTeX fragment: math, citations, notes and markup removed, accents and
    dashes turned into Unicode characters, whitespace collapsed."""
    text = strip_comments(text)
    text = text.replace(r"\$", "\x00DOLLAR\x00")
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$.*?\$", "", text, flags=re.S)
    text = re.sub(r"\\\(.*?\\\)", "", text, flags=re.S)
    text = re.sub(r"\\\[.*?\\\]", " ", text, flags=re.S)
    text = drop_commands(text)
    # \\ and \\[1ex] line breaks, \\* too
    text = re.sub(r"\\\\\*?(\s*\[[^\]]*\])?", " ", text)
    # Accents: \"a \"{a} {\"a} \'\i \c{c} \c c \v{s}
    text = re.sub(
        r"\\([\"'`^~=.])\s*(?:\{\s*(\\[ij](?![A-Za-z])|[A-Za-z])\s*\}|(\\[ij](?![A-Za-z])|[A-Za-z]))",
        lambda m: _compose(m.group(1), m.group(2) or m.group(3)),
        text,
    )
    text = re.sub(
        r"\\([cvuHkrdb])(?![A-Za-z])\s*(?:\{\s*(\\[ij](?![A-Za-z])|[A-Za-z])\s*\}|([A-Za-z]))",
        lambda m: _compose(m.group(1), m.group(2) or m.group(3)),
        text,
    )
    for name, char in sorted(_LETTERS.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(r"\\" + name + r"(?![A-Za-z])\s*(\{\})?", char, text)
    for name, char in _SYMBOLS.items():
        text = re.sub(r"\\" + name + r"(?![A-Za-z])\s*(\{\})?", char, text)
    for escaped, char in (("%", "%"), ("&", "&"), ("#", "#"), ("_", "_"), ("{", "\x00LB\x00"), ("}", "\x00RB\x00")):
        text = text.replace("\\" + escaped, char)
    text = re.sub(r"\\[,;: !>@/-]", lambda m: " " if m.group(0) in ("\\,", "\\;", "\\:", "\\ ", "\\>") else "", text)
    text = text.replace("---", "—").replace("--", "–")
    text = text.replace("``", "“").replace("''", "”").replace("`", "‘").replace("'", "’")
    text = text.replace("~", " ")
    # Remaining commands (\emph, \textbf, \small, \itshape ...) vanish; their arguments stay.
    text = re.sub(r"\\[A-Za-z@]+\*?", "", text)
    text = text.replace("{", "").replace("}", "")
    text = text.replace("\x00DOLLAR\x00", "$").replace("\x00LB\x00", "{").replace("\x00RB\x00", "}")
    text = re.sub(r"\s+", " ", text).strip()
    # "word ." left behind by a dropped \cite or \footnote
    text = re.sub(r" +([,.)])", r"\1", text)
    return text


# --------------------------------------------------------------------------------------------
# The fields
# --------------------------------------------------------------------------------------------


def _body(text: str) -> str:
    match = re.search(r"\\begin\{document\}", text)
    return text[match.end() :] if match else text


def _title(text: str) -> str:
    raw = first_arg(text, "title")
    return latex_to_text(raw) if raw is not None else ""


def _abstract(text: str) -> str | None:
    raw = environment(text, "abstract")
    if raw is None:
        raw = first_arg(_body(text), "abstract")
    if raw is None and re.search(r"\\abstracttext(?![A-Za-z])", _body(text)):
        match = re.search(r"\\(?:re)?newcommand\*?\s*\{?\\abstracttext\}?\s*", text)
        if match and text[match.end()] == "{":
            end = _group_end(text, match.end())
            raw = text[match.end() + 1 : end - 1]
    if raw is None:
        return None
    raw = drop_commands(raw, ("keywords",))
    return latex_to_text(raw) or None


def _split_keywords(raw: str) -> list[str]:
    raw = re.split(r"\\(?:PACS|MSC|JEL)(?![A-Za-z])", raw)[0]
    if re.search(r"\\sep(?![A-Za-z])", raw):
        parts = re.split(r"\\sep(?![A-Za-z])", raw)
    elif re.search(r"\\and(?![A-Za-z])", raw):
        parts = re.split(r"\\and(?![A-Za-z])", raw)
    elif "---" in raw:
        parts = raw.split("---")
    elif re.search(r"\s--\s", raw):
        parts = re.split(r"\s--\s", raw)
    else:
        parts = re.split(r"[,;]", raw)
    words = [latex_to_text(part).strip().rstrip(".").strip() for part in parts]
    return [word for word in words if word]


def _keywords(text: str) -> list[str]:
    body = _body(text)
    raw = first_arg(body, "keywords")
    if raw is None:
        raw = first_arg(text, "keywords")  # achemso, aastex: may sit in the preamble
    for env in ("keyword", "keywords", "IEEEkeywords"):
        if raw is None:
            raw = environment(text, env)
    return _split_keywords(raw) if raw is not None else []


def _names(chunk: str) -> list[str]:
    """Author names in one author block: the text before its first ``\\\\`` line break."""
    chunk = drop_commands(chunk, _DROP_WITH_ARG + ("affiliation", "address", "ead", "IEEEauthorblockA"))
    chunk = re.split(r"\\\\", chunk)[0]
    plain = latex_to_text(chunk)
    parts = re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*", plain)
    return [part.strip() for part in parts if part.strip()]


def _authors(text: str) -> list[str]:
    body = text
    blocks = [arg for _, _, arg in command_args(body, "IEEEauthorblockN")]
    if not blocks:
        blocks = [arg for _, _, arg in command_args(body, "Name")]
    if blocks:
        return [name for block in blocks for name in _names(block)]
    names = []
    for _, _, arg in command_args(body, "author"):
        for chunk in re.split(r"\\(?:and|AND)(?![A-Za-z])", arg):
            names.extend(_names(chunk))
    return names


def _first_section(text: str) -> str | None:
    raw = first_arg(_body(text), "section")
    return latex_to_text(raw) if raw is not None else None


def _language(text: str) -> str:
    match = re.search(r"\\usepackage\s*\[([^\]]*)\]\s*\{babel\}", text)
    if match:
        options = [opt.strip() for opt in match.group(1).split(",") if opt.strip()]
        for opt in options:
            if opt.startswith("main="):
                return opt[5:]
        languages = [opt for opt in options if "=" not in opt]
        if languages:
            return languages[-1]
    match = re.search(r"\\setdefaultlanguage\s*(?:\[[^\]]*\])?\s*\{(\w+)\}", text)
    if match:
        return match.group(1)
    return "english"


def truth(tex_path) -> dict:
    """Title, abstract (None when the paper has none), keywords, authors, first section heading
    (None when none) and babel language ("english" by default) of a fixture, as plain text."""
    text = strip_comments(Path(tex_path).read_text(encoding="utf-8"))
    return {
        "title": _title(text),
        "abstract": _abstract(text),
        "keywords": _keywords(text),
        "authors": _authors(text),
        "first_section": _first_section(text),
        "language": _language(text),
    }


def engine(tex_path) -> str:
    """The engine named by the fixture's ``% engine:`` line (pdflatex when none)."""
    match = re.search(r"^%\s*engine:\s*([a-z]+)", Path(tex_path).read_text(encoding="utf-8"), re.M)
    return match.group(1) if match else "pdflatex"


def fixtures() -> list[Path]:
    """Every fixture .tex that has its compiled .pdf beside it, sorted by name."""
    return sorted(p for p in PAPERS_DIR.glob("*.tex") if p.with_suffix(".pdf").exists())


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


def words(text: str | None) -> list[str]:
    """Lowercase words of three or more Unicode letters."""
    return re.findall(r"[^\W\d_]{3,}", (text or "").lower())


def bag_f1(predicted: str | None, truth: str | None) -> float:
    """F1 over the multisets of :func:`words`: 1.0 when both sides are None or blank, 0.0 when
    exactly one is (and likewise when neither or only one side has any word)."""
    pred_blank, gold_blank = not (predicted or "").strip(), not (truth or "").strip()
    if pred_blank or gold_blank:
        return 1.0 if pred_blank and gold_blank else 0.0
    pred, gold = Counter(words(predicted)), Counter(words(truth))
    if not pred or not gold:
        return 1.0 if not pred and not gold else 0.0
    overlap = sum((pred & gold).values())
    if overlap == 0:
        return 0.0
    precision = overlap / sum(pred.values())
    recall = overlap / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


if __name__ == "__main__":
    paths = [Path(arg) for arg in sys.argv[1:]] or sorted(PAPERS_DIR.glob("*.tex"))
    for path in paths:
        info = truth(path)
        print(f"== {path.stem} ({engine(path)})")
        for key in ("title", "authors", "keywords", "first_section", "language"):
            print(f"  {key:13s} {info[key]!r}")
        abstract = info["abstract"]
        if abstract is None:
            print("  abstract      None")
        else:
            print(f"  abstract      {len(words(abstract))} words: {abstract[:90]!r}...{abstract[-40:]!r}")
