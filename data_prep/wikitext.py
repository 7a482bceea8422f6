"""Wikipedia XML dumps as plain-text documents, streamed.

:func:`iter_wiki_pages` reads a ``pages-articles`` export (plain, bzip2 or gzip, told
apart by the first bytes) element by element and drops each page from the tree once
read, so memory stays flat however large the dump; it yields the articles (namespace 0,
not redirects) as :func:`strip_markup` leaves them: the text a reader sees, one
paragraph per line, section titles on lines of their own.

What goes:

- templates ``{{...}}`` and template parameters ``{{{...}}}``, nested to any depth
  (infoboxes, citations, ``{{DEFAULTSORT:...}}``); they are dropped, not expanded, so
  text a template would render (``{{convert|5|km}}``) is lost;
- tables ``{| ... |}``, nested too;
- category, file and media links (``[[Category:X]]``,
  ``[[File:x.png|thumb|A [[caption]] link]]``): the canonical namespace names, ``Image``,
  and the local names the dump's ``<siteinfo>`` lists (``Kategorie``, ``Datei``);
- interlanguage links (``[[de:Anarchismus]]``): a prefix that looks like a language
  code (lower case, 2-3 letters and optional subtags as in ``zh-min-nan``, or
  ``simple``) and no leading colon. A link to an article titled that way
  (``[[re:publica]]``) goes too; MediaWiki knows its interwiki table, a dump does not;
- ``<ref>`` citations (``<ref>...</ref>``, ``<ref name="x"/>``) and the other tags that
  hold no prose (:data:`DROPPED_TAGS`: ``<math>``, ``<gallery>`` ...);
- HTML comments, magic words (``__NOTOC__``), HTML tags (their content stays),
  bold and italic quotes, list and indent markers, horizontal rules.

What stays: the text; link labels (``[[a|b]]`` -> ``b``, ``[[a]]`` -> ``a``,
``[[:Category:X]]`` -> ``Category:X``, the pipe trick ``[[Paris, Texas|]]`` ->
``Paris``); external link labels (``[https://x.org label]`` -> ``label``); section
titles (``== History ==`` -> ``History``); ``<nowiki>`` content as written.

The structure is parsed, not matched by regular expressions: template, table and link
openers go on a stack, so a closer ends the construct it belongs to at any depth.
Comments and tags such as ``<ref>`` are opaque, as in MediaWiki's preprocessor (a
``}}`` inside a ``<ref>`` closes nothing). An opener that is never closed is text, as
MediaWiki shows it, except a table, which runs to the end of the page.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .inputs import file_kind

# Tags whose content is not prose; dropped with it.
DROPPED_TAGS = (
    "ref",
    "references",
    "math",
    "chem",
    "ce",
    "gallery",
    "imagemap",
    "timeline",
    "graph",
    "mapframe",
    "maplink",
    "score",
    "hiero",
    "syntaxhighlight",
    "source",
    "pre",
    "templatedata",
    "templatestyles",
    "categorytree",
    "inputbox",
)
LITERAL_TAGS = ("nowiki",)  # content kept as written
# Canonical names of the namespaces whose links are not prose (Media -2, File 6, Category 14),
# which every wiki accepts, and File's old name. Compared lower-cased, "_" as " ".
DROPPED_NAMESPACES = frozenset({"media", "file", "image", "category"})
DROPPED_NAMESPACE_KEYS = ("-2", "6", "14")

_TOKEN = re.compile(
    r"<!--"
    r"|^[ \t]*(?:\{\||\|\})"  # a table's start or end: only at the start of a line
    r"|\{\{+|\}\}+"
    r"|\[\[|\]\]+"
    rf"|<({'|'.join(DROPPED_TAGS + LITERAL_TAGS)})(?=[\s/>])[^>]*>",
    re.M | re.I,
)
_LINK_TARGET = re.compile(r"[ \t]*(:?)[ \t]*([^|\[\]{}<>\n]*)")
_LANGUAGE = re.compile(r"(?:[a-z]{2,3}(?:-[a-z]{2,8})*|simple)\Z")

_EXTERNAL = re.compile(r"\[(?:(?:https?|ftps?|irc|news|gopher)://|//|mailto:)[^\s\]]*(?:[ \t]+([^\]\n]*))?\]", re.I)
_BREAK = re.compile(r"<br\s*/?>", re.I)
_HTML_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?>")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EMPHASIS = re.compile(r"'''''|'''|''")
_HEADING = re.compile(r"^(={1,6})[ \t]*(.*?)[ \t]*\1[ \t]*$", re.M)
_LIST_MARK = re.compile(r"^[*#:;]+[ \t]*", re.M)
_RULE = re.compile(r"^-{4,}", re.M)


def namespace_key(name: str) -> str:
    """A namespace name as links may write it, made comparable: ``"Category_ "`` -> ``"category"``."""
    return " ".join(name.replace("_", " ").split()).lower()


@functools.lru_cache(maxsize=None)
def _closing_tag(name: str) -> re.Pattern:
    return re.compile(rf"</{name}\s*>", re.I)


@dataclass
class _Open:
    """A construct whose closer has not been seen yet.

    Attributes:
        kind: "braces" (a template or parameter), "table" or "link".
        width: braces: how many braces opened it (2 or 3).
        outer: where text outside it goes (None inside something dropped).
        inner: where its own text goes: a kept link's buffer, or None (dropped).
        opener: the opening characters, written back if it is never closed.
        body: where its content starts in the text.
        outer_length: ``len(outer)`` when it opened.
    """

    kind: str
    width: int
    outer: list | None
    inner: list | None
    opener: str
    body: int
    outer_length: int


def _link_is_dropped(text: str, start: int, namespaces: frozenset[str]) -> bool:
    """Whether the link whose target starts at ``start`` is a category, file or interlanguage link."""
    colon, target = _LINK_TARGET.match(text, start).groups()
    prefix, separator, _ = target.partition(":")
    if colon or not separator:
        return False  # a leading colon makes any link an inline one
    return namespace_key(prefix) in namespaces or _LANGUAGE.match(prefix.strip()) is not None


def _link_label(content: str) -> str:
    """What a reader sees of ``[[content]]`` (content already stripped of nested markup)."""
    target, bar, label = content.partition("|")
    target = target.strip().lstrip(":").strip()
    if bar and label.strip():
        return label.strip()
    if bar:  # the pipe trick: namespace, a final "(...)" and anything after a comma go
        title = target.split(":", 1)[-1]
        title = re.sub(r"\s*\([^()]*\)\s*\Z", "", title)
        return title.split(",", 1)[0].strip()
    return target


def _scan(text: str, pos: int, out: list[str], namespaces: frozenset[str]) -> _Open | None:
    """Parse ``text[pos:]`` into ``out``; returns the outermost construct left open (a table: None)."""
    stack: list[_Open] = []
    sink: list[str] | None = out
    end = len(text)

    def push(kind: str, width: int, opener: str, keep: bool, body: int) -> None:
        nonlocal sink
        inner = [] if keep and sink is not None else None
        stack.append(_Open(kind, width, sink, inner, opener, body, len(sink) if sink is not None else 0))
        sink = inner

    def close_at(index: int) -> _Open:
        nonlocal sink
        frame = stack[index]
        del stack[index:]
        sink = frame.outer
        return frame

    def nearest(kind: str, through: tuple[str, ...]) -> int | None:
        """Index of the innermost open ``kind``, passing only constructs of the kinds ``through``."""
        for index in range(len(stack) - 1, -1, -1):
            if stack[index].kind == kind:
                return index
            if stack[index].kind not in through:
                return None
        return None

    while True:
        match = _TOKEN.search(text, pos)
        stop = match.start() if match else end
        if sink is not None and stop > pos:
            sink.append(text[pos:stop])
        if match is None:
            break
        token, pos = match.group(), match.end()
        bare = token.lstrip(" \t")
        if token == "<!--":
            close = text.find("-->", pos)
            pos = end if close < 0 else close + 3
        elif match.group(1):  # a tag from DROPPED_TAGS or LITERAL_TAGS
            if token.endswith("/>"):
                continue
            name = match.group(1).lower()
            close = _closing_tag(name).search(text, pos)
            if close is None:
                continue  # never closed: only the tag goes
            if name in LITERAL_TAGS and sink is not None:
                sink.append(text[pos : close.start()])
            pos = close.end()
        elif bare == "{|":
            push("table", 0, token, False, pos)
        elif bare == "|}":
            index = nearest("table", through=("link",))
            if index is not None:
                close_at(index)
            else:  # not a table's end: the "|" is text and the "}" may close braces
                bar = match.start() + token.index("|") + 1
                if sink is not None:
                    sink.append(text[match.start() : bar])
                pos = bar
        elif token[0] == "{":
            # A run opens templates ("{{") around, for an odd run, one parameter ("{{{"):
            # "{{{{{a}}}}}" is a template named by a parameter, as in MediaWiki.
            run = len(token)
            widths = [2] * (run // 2) if run % 2 == 0 else [2] * ((run - 3) // 2) + [3]
            start = match.start()
            for width in widths:
                start += width
                push("braces", width, "{" * width, False, start)
        elif token[0] == "}":
            run = len(token)
            while run >= 2:
                index = nearest("braces", through=("link", "table"))
                if index is None:
                    break
                run -= min(close_at(index).width, run)
            if run and sink is not None:
                sink.append("}" * run)
        elif token == "[[":
            push("link", 0, token, not _link_is_dropped(text, pos, namespaces), pos)
        else:  # a run of "]": "]]" closes a link; a longer run closes the innermost links it can,
            # and its first brackets are text inside them ("[[File:x|[https://y z]]]").
            links = 0
            while links < len(stack) and stack[-1 - links].kind == "link":
                links += 1
            closes = min(links, len(token) // 2)
            text_brackets = token[: len(token) - 2 * closes]
            if text_brackets and sink is not None:
                sink.append(text_brackets)
            for _ in range(closes):
                frame = close_at(len(stack) - 1)
                if frame.inner is not None and sink is not None:
                    sink.append(_link_label("".join(frame.inner)))
    return stack[0] if stack and stack[0].kind != "table" else None


def _structure(text: str, namespaces: frozenset[str]) -> str:
    """Templates, tables, comments, dropped tags and links resolved (see the module docstring)."""
    out: list[str] = []
    pos = 0
    # Each pass that ends with an unclosed opener writes that opener back as text and
    # parses again after it; every pass moves past one opener, so this ends.
    while (unclosed := _scan(text, pos, out, namespaces)) is not None:
        del out[unclosed.outer_length :]
        out.append(unclosed.opener)
        pos = unclosed.body
    return "".join(out)


def strip_markup(wikitext: str, namespaces: frozenset[str] = DROPPED_NAMESPACES) -> str:
    """The plain text of an article: one paragraph per line, section titles on their own lines.

    Args:
        namespaces: namespace names whose links are dropped, as :func:`namespace_key` writes them.
    """
    text = _structure(wikitext, namespaces)
    text = _EXTERNAL.sub(lambda m: m.group(1) or "", text)
    text = _BREAK.sub(" ", text)
    text = _HTML_TAG.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = _HEADING.sub(lambda m: m.group(2), text)
    text = _LIST_MARK.sub("", text)
    text = _RULE.sub("", text)
    text = html.unescape(text)
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


class NotAWikiDump(ValueError):
    """The file is XML, but not a MediaWiki export."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def open_dump(path: Path):
    """``path`` as a binary stream, decompressed when its first bytes say bzip2 or gzip."""
    kind = file_kind(path)
    if kind == "bzip2-compressed":
        return bz2.open(path, "rb")
    if kind == "gzip-compressed":
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_wiki_pages(path: Path) -> Iterator[tuple[str, str]]:
    """``(title, plain text)`` of every article of a dump, in dump order.

    Raises:
        NotAWikiDump: the file is not XML, or its root element is not ``<mediawiki>``.
        EOFError: a truncated compressed file, after every page before the damage.
        xml.etree.ElementTree.ParseError: broken XML, after every page before it.
        OSError, zlib.error: broken compression, after every page before it.
    """
    namespaces, local_names = DROPPED_NAMESPACES, set()
    with open_dump(path) as stream:
        root = None
        title = namespace = text = None
        redirect = False
        events = ET.iterparse(stream, events=("start", "end"))
        try:
            event, root = next(events)
        except ET.ParseError as err:
            raise NotAWikiDump(f"not XML: {err}") from None
        except StopIteration:
            raise NotAWikiDump("no XML in it") from None
        if _local(root.tag) != "mediawiki":
            raise NotAWikiDump(f"the root element is <{_local(root.tag)}>, not <mediawiki>")
        for event, element in events:
            if event == "start":
                continue
            tag = _local(element.tag)
            if tag == "namespace":
                if element.get("key") in DROPPED_NAMESPACE_KEYS and element.text:
                    local_names.add(namespace_key(element.text))
            elif tag == "siteinfo":
                namespaces = DROPPED_NAMESPACES | local_names
            elif tag == "title":
                title = element.text or ""
            elif tag == "ns":
                namespace = (element.text or "").strip()
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                text = element.text or ""
            elif tag == "page":
                article = namespace in (None, "0") and not redirect and text
                if article and not text.lstrip().upper().startswith("#REDIRECT"):
                    plain = strip_markup(text, namespaces)
                    if plain:
                        yield title or "", plain
                title = namespace = text = None
                redirect = False
            if tag in ("page", "siteinfo"):
                root.clear()  # the tree keeps nothing of a page once it is read
