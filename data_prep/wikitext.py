"""Wikipedia XML dumps as plain-text documents, streamed.

``iter_wiki_pages`` reads ``.xml`` or ``.xml.bz2`` dumps element by element (memory stays
flat on a 20 GB dump) and yields article pages (namespace 0, not redirects);
``strip_markup`` turns wikitext into plain paragraphs. The stripper is a set of regular
expressions, not a MediaWiki parser: it removes what a language model should not see
(templates, tables, references, files, categories, markup) and keeps the prose.
"""

from __future__ import annotations

import bz2
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_DROP_BLOCKS = re.compile(r"<(math|gallery|timeline|score|syntaxhighlight|source|pre)\b[^>]*>.*?</\1>", re.S | re.I)
_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")  # innermost only; applied until none is left
_TABLE = re.compile(r"\{\|[^{}]*?\|\}", re.S)
_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")  # innermost
_EXTERNAL = re.compile(r"\[(?:https?|ftp)://[^\s\]]+(?:\s+([^\]]*))?\]")
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_HEADING = re.compile(r"^(=+)\s*(.*?)\s*\1\s*$", re.M)
_EMPHASIS = re.compile(r"'{2,}")
_LIST_MARK = re.compile(r"^[*#:;]+\s*", re.M)
_NON_ARTICLE_LINK = re.compile(r"^\s*:?\s*(file|image|category|media)\s*:", re.I)


def _innermost(pattern: re.Pattern, repl, text: str) -> str:
    while True:
        text, n = pattern.subn(repl, text)
        if not n:
            return text


def _link_text(match: re.Match) -> str:
    target = match.group(1)
    if _NON_ARTICLE_LINK.match(target):
        return ""
    return target.rsplit("|", 1)[-1]


def strip_markup(wikitext: str) -> str:
    """Plain text of an article: one paragraph per line, headings on their own lines."""
    text = _COMMENT.sub("", wikitext)
    text = _REF.sub("", text)
    text = _DROP_BLOCKS.sub("", text)
    text = _innermost(_TEMPLATE, "", text)
    text = _innermost(_TABLE, "", text)
    text = _innermost(_LINK, _link_text, text)
    text = _EXTERNAL.sub(lambda m: m.group(1) or "", text)
    text = _TAG.sub("", text)
    text = _HEADING.sub(lambda m: m.group(2), text)
    text = _EMPHASIS.sub("", text)
    text = _LIST_MARK.sub("", text)
    text = html.unescape(text)
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line and line not in ("}}", "|}", "{|"))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_wiki_pages(path: Path) -> Iterator[tuple[str, str]]:
    """``(title, plain text)`` of every article of a dump.

    Raises EOFError (truncated ``.bz2``) or ``xml.etree.ElementTree.ParseError``
    (broken XML) after yielding every page read before the damage.
    """
    opener = bz2.open if str(path).endswith(".bz2") else open
    with opener(path, "rb") as stream:
        title = namespace = text = None
        redirect = False
        for _, element in ET.iterparse(stream, events=("end",)):
            tag = _local(element.tag)
            if tag == "title":
                title = element.text or ""
            elif tag == "ns":
                namespace = (element.text or "").strip()
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                text = element.text or ""
            elif tag == "page":
                if (
                    namespace in (None, "0")
                    and not redirect
                    and text
                    and not text.lstrip().upper().startswith("#REDIRECT")
                ):
                    plain = strip_markup(text)
                    if plain:
                        yield title or "", plain
                title = namespace = text = None
                redirect = False
                element.clear()  # keep memory flat over the whole dump
