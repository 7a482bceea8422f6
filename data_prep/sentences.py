"""A simple sentence splitter: no model, no download, the same result everywhere.

ROUGE-Lsum scores a summary sentence by sentence, and summaries are kept one sentence
per line (``"first.\\nsecond."``). Where a text does not come split, this splitter
splits it, by these rules:

- a newline always ends a sentence;
- within a line, a sentence ends after ``.``, ``!`` or ``?`` (a run of them, then any
  closing quotes or brackets) that is followed by white space;
- except after a period that ends a known abbreviation (:data:`ABBREVIATIONS`: "e.g.",
  "Fig.", "et al." ...) or initials ("J.", "U.S."), or one followed by a lowercase word
  ("approx. three"). A text without any capital letter (corpora lowercased as a whole,
  such as Cohan et al.'s arXiv and PubMed) has no such signal, so there only the
  abbreviations and initials hold a period back.

It is meant for English scientific and news prose; it does not know every abbreviation,
and "made in the U.S. The next day" stays one sentence.
"""

from __future__ import annotations

import re

# Lowercase, without the final period.
ABBREVIATIONS = frozenset(
    "al approx cf ch dr e.g eq eqs etc fig figs i.e jr mr mrs ms no nos pp prof ref refs resp sec secs sr st tab "
    "viz vol vs".split()
)
_CLOSERS = "\"')]\u2019\u201d"
_OPENERS = "\"'([\u2018\u201c"
_END = re.compile(rf"[.!?]+[{re.escape(_CLOSERS)}]*(?=\s)")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+")


def _ends_sentence(line: str, mark: re.Match, cased: bool) -> bool:
    """Whether ``mark``, a match of :data:`_END` in ``line``, ends a sentence."""
    if set(mark.group().rstrip(_CLOSERS)) != {"."}:
        return True  # "!" or "?"
    before = line[: mark.start()]
    word = before.split()[-1].lstrip(_OPENERS) if before and not before[-1].isspace() else ""
    if word.lower() in ABBREVIATIONS or _INITIALS.fullmatch(word + "."):
        return False
    return not (cased and line[mark.end() :].lstrip()[:1].islower())


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty ones dropped (rules in the module docstring)."""
    cased = any(c.isupper() for c in text)
    sentences = []
    for line in text.splitlines():
        begin = 0
        for match in _END.finditer(line):
            if _ends_sentence(line, match, cased):
                sentences.append(line[begin : match.end()])
                begin = match.end()
        sentences.append(line[begin:])
    return [s.strip() for s in sentences if s.strip()]
