"""What prepared data and the models agree on.

``data_prep/`` writes datasets and the plugin reads them, trains on them and scores what
comes out; neither imports the other (``docs/design.md``, "Layout"). What both must
agree on lives here, and only that: a change here changes both sides at once.

- fairseq's special symbols and their ids (:data:`BOS` ... :data:`NUM_SPECIALS`);
- the manifest a preparation leaves (:data:`MANIFEST`) and the kinds it records
  (:class:`PrepKind`);
- how GPT-2 BPE ids become model ids through RoBERTa's ``dict.txt``
  (:func:`dictionary_lookup`);
- a character corpus's byte symbols (:func:`byte_symbol`);
- how a QA example becomes windows ``<s> question </s> document </s>`` (:func:`make_windows`);
- the marker symbols a task adds to the dictionary (:data:`WIKIHOP_SYMBOLS`), the
  datasets a fine-tuning preparation writes for its task (:data:`HOTPOTQA_FILES`), and
  how a coreference document splits into segments (:func:`segment_count`), and the
  names of a summarization pair's sides (:data:`SOURCE`, :data:`TARGET`);
- each QA dataset's answer normalisation (:data:`NORMALIZATIONS`): TriviaQA's distant
  supervision (``prep qa``) must call equal exactly what its metric does;
- the sentence splitter (:func:`split_sentences`): references are prepared, and
  hypotheses scored, one sentence per line for ROUGE-Lsum, split by the same rules;
- :func:`jsonl_records`: the JSONL files both read, and how a bad line is named.

This module imports no more than the standard library and numpy: the spawn workers of
``prep docs`` import it, and each would otherwise pay for torch or fairseq at start.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

# ---------------------------------------------------------------- fairseq's special symbols

# fairseq's Dictionary() starts with these four symbols, in this order; every dictionary
# of RoBERTa, BART and our byte-level corpora keeps them (a test compares with fairseq).
BOS, PAD, EOS, UNK = 0, 1, 2, 3
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")
NUM_SPECIALS = len(SPECIAL_SYMBOLS)
# RoBERTa's and BART's mask symbol, the last row of their dictionaries.
MASK = "<mask>"
# XLM-R's SentencePiece model, under its name in fairseq's and HF's releases; our converters
# write it beside model.pt under the same name.
SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"


# A character corpus's dictionary (``prep text8``/``enwik8``) lists each byte seen as this symbol.
def first_data_directory(data: str | os.PathLike) -> Path:
    """The first of fairseq's data directories (``DIR1:DIR2:...``, joined by ``os.pathsep``
    for sharded data): where a task keeps its dictionaries."""
    return Path(str(data).split(os.pathsep)[0])


def byte_symbol(byte: int) -> str:
    """The dictionary symbol of one byte of text: ``0x61`` for ``a``."""
    return f"0x{byte:02x}"


# ---------------------------------------------------------------- GPT-2 BPE ids as model ids
# RoBERTa's ``dict.txt`` lists GPT-2 ids (as strings) in model order after fairseq's four
# specials, so a lookup table turns GPT-2 ids into model ids; GPT-2 ids missing from the
# dictionary become ``<unk>``. ``prep`` maps text this way and ``export-hf`` writes the
# same map into the HF tokenizer.


class BpeError(ValueError):
    """The BPE files or the dictionary are unusable."""


def dictionary_lookup(dict_txt: Path, gpt2_vocab_size: int) -> np.ndarray:
    """``lut[gpt2_id] = fairseq id`` (``<unk>`` where the dictionary lacks the id).

    Symbols that are not GPT-2 ids may follow the ids (RoBERTa's ``madeupword`` padding,
    symbols added for a task such as WikiHop's ``[q]``); one before them means the file
    is not a GPT-2 BPE dictionary.
    """
    if not Path(dict_txt).is_file():
        raise BpeError(f"{dict_txt}: not found (the model's fairseq dict.txt)")
    lut = np.full(gpt2_vocab_size, UNK, dtype=np.int64)
    added = None  # the first symbol that is not a GPT-2 id
    for index, line in enumerate(Path(dict_txt).read_text(encoding="utf-8").splitlines()):
        symbol = line.rsplit(" ", 1)[0]
        if symbol.isdigit():
            if added is not None:
                raise BpeError(f"{dict_txt}:{index + 1}: GPT-2 id {symbol} after the added symbol {added!r}")
            if int(symbol) < gpt2_vocab_size:
                lut[int(symbol)] = NUM_SPECIALS + index
        elif index == 0:
            raise BpeError(f"{dict_txt}:1: {symbol!r} is not a GPT-2 id; is this RoBERTa's dict.txt?")
        else:
            added = added or symbol
    return lut


def vocab_size(encoder_json: Path) -> int:
    """GPT-2 ids in ``encoder.json``: its largest id + 1."""
    return max(json.loads(Path(encoder_json).read_text(encoding="utf-8")).values()) + 1


def dictionary_size(dict_txt: Path) -> int:
    """Rows a model's embedding needs for ``dict_txt``: fairseq's specials + its lines."""
    return NUM_SPECIALS + sum(1 for _ in Path(dict_txt).open(encoding="utf-8"))


# ---------------------------------------------------------------- prepared directories

# Every finished ``longformer-fs prep`` run leaves this manifest in its output directory; it
# records the kind of preparation, which the recipes and evaluations check before reading.
MANIFEST = "prep.json"


class PrepKind:
    """The ``kind`` a manifest records: the ``prep`` subcommand that wrote the directory."""

    DOCS = "docs"
    SUMMARIZATION = "summarization"
    CLASSIFICATION = "classification"
    QA = "qa"
    WIKIHOP = "wikihop"
    HOTPOTQA = "hotpotqa"
    COREF = "coref"


# ---------------------------------------------------------------- task symbols

# WikiHop's markers, appended to the model's dictionary by ``prep wikihop`` and required
# by the ``longformer_wikihop`` task: ``<s> [q] question [/q] [ent] c1 [/ent] ...``.
WIKIHOP_SYMBOLS = ("[q]", "[/q]", "[ent]", "[/ent]")

# HotpotQA's markers (paper, Appendix B), appended by ``prep hotpotqa`` and required by the
# ``longformer_hotpotqa`` task: ``<s> [q] question [/q] [p] title [s] sentence [s] ... [p] ...``.
HOTPOTQA_SYMBOLS = ("[q]", "[/q]", "[p]", "[s]")

# ---------------------------------------------------------------- WikiHop inputs
# A WikiHop example as the model reads it: ``prep wikihop`` writes these, and the hub builds
# the same from a query, its candidates and its supports.


def wikihop_question(query: str) -> str:
    """``"country_of_citizenship thomas of brotherton"`` -> ``"country of citizenship thomas of brotherton"``."""
    relation, _, entity = query.strip().partition(" ")
    return f"{relation.replace('_', ' ')} {entity.strip()}".strip()


def wikihop_pieces(question: str, candidates, supports) -> list[str]:
    """The texts to encode, in order: the question, each candidate, each support, each as
    it reads after a symbol or ``</s>`` in running text, with a space before it; then a
    candidate's GPT-2 pieces are those of its mentions in the supports (" england", not
    "england"), which the model must match."""
    return [" " + text for text in (question, *candidates, *supports)]


def wikihop_prefix(question_ids: np.ndarray, candidate_ids: list[np.ndarray], ids: dict[str, int]) -> np.ndarray:
    """``<s> [q] question [/q] [ent] c1 [/ent] [ent] c2 [/ent] ...`` as model ids (int64)."""
    parts = [[BOS, ids["[q]"]], question_ids, [ids["[/q]"]]]
    for candidate in candidate_ids:
        parts += [[ids["[ent]"]], candidate, [ids["[/ent]"]]]
    return np.concatenate(parts).astype(np.int64)


def wikihop_context(support_ids: list[np.ndarray]) -> np.ndarray:
    """``</s> support1 </s> support2 </s> ... </s>`` as model ids (int64)."""
    parts = [piece for support in support_ids for piece in ([EOS], support)] + [[EOS]]
    return np.concatenate(parts).astype(np.int64)


# ---------------------------------------------------------------- fine-tuning datasets

# The mmap datasets (``{split}.{name}.bin/.idx``) that ``prep`` writes for each fine-tuning
# task and its task reads back by name, item ``i`` of each belonging to example ``i``.
QA_FILES = ("tokens", "starts", "ends", "offsets")
WIKIHOP_FILES = ("prefix", "context", "label")
HOTPOTQA_FILES = ("tokens", "offsets", "starts", "ends", "paragraphs", "sentences", "qtype")
COREF_FILES = ("tokens", "sentence", "speaker", "mentions")

# ---------------------------------------------------------------- QA inputs
# An extractive QA example as the model reads it: ``prep qa`` writes these windows, and the
# hub interfaces build the same from a question and a document.


@dataclass(frozen=True)
class QaWindow:
    """One model input ``<s> question </s> document part </s>`` of ``n`` tokens.

    Attributes:
        tokens: (n,) int64 model ids.
        starts: (k,) int32 positions in the window of the gold starts.
        ends: (k,) int32 positions of the matching (inclusive) gold ends.
        offsets: (n, 2) int32 context characters ``[start, end)`` of each token; -1 -1
            for ``<s>``, the question and ``</s>``.
    """

    tokens: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    offsets: np.ndarray


def document_room(question_tokens: int, max_tokens: int) -> int:
    """Document tokens a window holds next to a question: ``max_tokens`` minus the
    question and ``<s>``, ``</s>``, ``</s>``."""
    return max_tokens - question_tokens - 3


def make_windows(
    question_ids: np.ndarray,
    doc_ids: np.ndarray,
    doc_offsets: np.ndarray,
    answer_tokens: np.ndarray,
    max_tokens: int,
    doc_stride: int | None = None,
) -> list[QaWindow]:
    """The windows of one example.

    Args:
        question_ids: (q,) model ids of the question.
        doc_ids: (d,) model ids of the context.
        doc_offsets: (d, 2) their context characters.
        answer_tokens: (k, 2) gold token spans (first, last) in ``doc_ids``.
        max_tokens: the most tokens a window may have.
        doc_stride: None: one window, the document truncated to fit; N: windows starting
            ``min(N, room)`` document tokens apart until the document's end is covered.

    Raises:
        ValueError: the question leaves no room for a document token.
    """
    room = document_room(len(question_ids), max_tokens)
    if room < 1:
        raise ValueError(f"the question has {len(question_ids)} tokens: no room for the document in {max_tokens}")
    n = len(doc_ids)
    bounds = []
    start = 0
    step = min(doc_stride, room) if doc_stride else None
    while True:
        end = min(start + room, n)
        bounds.append((start, end))
        if step is None or end >= n:
            break
        start += step
    prefix = np.concatenate([[BOS], np.asarray(question_ids, dtype=np.int64), [EOS]])
    shift = len(prefix)
    answer_tokens = np.asarray(answer_tokens, dtype=np.int64).reshape(-1, 2)
    windows = []
    for start, end in bounds:
        tokens = np.concatenate([prefix, doc_ids[start:end], [EOS]]).astype(np.int64)
        offsets = np.full((len(tokens), 2), -1, dtype=np.int32)
        offsets[shift : shift + end - start] = doc_offsets[start:end]
        inside = answer_tokens[(answer_tokens[:, 0] >= start) & (answer_tokens[:, 1] < end)]
        windows.append(
            QaWindow(
                tokens,
                (inside[:, 0] - start + shift).astype(np.int32),
                (inside[:, 1] - start + shift).astype(np.int32),
                offsets,
            )
        )
    return windows


# ---------------------------------------------------------------- summarization data

# LED's data is fairseq ``translation`` data whose two sides are named so: ``prep
# summarization`` writes ``{split}.source-target.{source,target}`` and ``dict.source.txt``,
# and the translation task reads them back by these names.
SOURCE, TARGET = "source", "target"

# Coreference reads a document as consecutive segments ``<s> tokens </s>`` of the model's
# length: ``prep coref`` counts them for its stats, the task builds them.
SEGMENT_SPECIALS = 2  # <s> and </s>


def segment_room(max_positions: int) -> int:
    """A segment's document tokens at ``max_positions`` positions; ValueError when none fit."""
    room = max_positions - SEGMENT_SPECIALS
    if room < 1:
        raise ValueError(f"max_positions: {max_positions} leaves no room for tokens between <s> and </s>")
    return room


def segment_count(tokens, max_positions: int):
    """The segments a document of ``tokens`` tokens takes (at least one); an int or an array of them."""
    return np.maximum(-(-np.asarray(tokens) // segment_room(max_positions)), 1)


# ---------------------------------------------------------------- answer normalisation

_ARTICLES = re.compile(r"\b(a|an|the)\b")


@dataclass(frozen=True)
class AnswerNormalization:
    """How an official QA script makes answers comparable.

    Both scripts lower-case, remove the articles a/an/the (as whole words, after the
    punctuation step) and collapse white space; they differ on punctuation.

    Attributes:
        name: the convention's name (the dataset whose script defines it).
        description: how it treats punctuation, for reports.
        word: a word before article removal: a maximal run of characters that are
            neither white space nor a separator.
        deleted: ``str.translate`` table of the characters deleted inside words.
        empty_f1: the F1 when prediction and answer both normalise to nothing (SQuAD
            2.0's script: 1, a correct "no answer"; TriviaQA's: 0, nothing in common).
    """

    name: str
    description: str
    word: re.Pattern
    deleted: dict
    empty_f1: float

    def words(self, text: str) -> list[tuple[str, int, int]]:
        """The normalised words of ``text``, each with ``[start, end)``: the characters of
        ``text`` it came from (an article removed from inside a run leaves its neighbours
        with the whole run's span)."""
        lowered = text.lower()  # the whole text at once, as the scripts do: a final "Σ" depends on what follows
        where = range(len(text) + 1)
        if len(lowered) != len(text):  # a character lowered to two ("İ"): map positions
            where = list(itertools.accumulate((len(c.lower()) for c in text), initial=0))
        words = []
        for match in self.word.finditer(text):
            run = lowered[where[match.start()] : where[match.end()]]
            for word in _ARTICLES.sub(" ", run.translate(self.deleted)).split():
                words.append((word, match.start(), match.end()))
        return words

    def normalize(self, text: str) -> str:
        """The answer as the official script compares it."""
        return " ".join(word for word, _, _ in self.words(text))


# triviaqa_evaluation.py: "_" to " ", lower, string.punctuation and ‘ ’ ´ ` to spaces, articles, white space.
_TRIVIAQA_SEPARATORS = string.punctuation + "\u2018\u2019\u00b4"
TRIVIAQA = AnswerNormalization(
    "triviaqa",
    "punctuation and underscores become spaces",
    re.compile(f"[^\\s{re.escape(_TRIVIAQA_SEPARATORS)}]+"),
    {},
    0.0,
)
# SQuAD's evaluate-v2.0.py (v1.1's is the same but for empty answers): lower, string.punctuation
# deleted, articles, white space.
SQUAD = AnswerNormalization(
    "squad", "punctuation is deleted", re.compile(r"\S+"), str.maketrans("", "", string.punctuation), 1.0
)
# The convention of each dataset's official evaluation. HotpotQA's script normalises as SQuAD's.
NORMALIZATIONS = {"triviaqa": TRIVIAQA, "squad": SQUAD, "hotpotqa": SQUAD}


# ---------------------------------------------------------------- sentences
# ROUGE-Lsum scores a summary sentence by sentence, and summaries are kept one sentence
# per line (``"first.\nsecond."``). Where a text does not come split, this splitter
# splits it, with no model and no download, the same result everywhere, by these rules:
#
# - a newline always ends a sentence;
# - within a line, a sentence ends after ``.``, ``!`` or ``?`` (a run of them, then any
#   closing quotes or brackets) that is followed by white space;
# - except after a period that ends a known abbreviation (:data:`ABBREVIATIONS`: "e.g.",
#   "Fig.", "et al." ...) or initials ("J.", "U.S."), or one followed by a lowercase word
#   ("approx. three"). A text without any capital letter (corpora lowercased as a whole,
#   such as Cohan et al.'s arXiv and PubMed) has no such signal, so there only the
#   abbreviations and initials hold a period back.
#
# It is meant for English scientific and news prose; it does not know every
# abbreviation, and "made in the U.S. The next day" stays one sentence.

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
    """The sentences of ``text``, stripped, empty ones dropped (rules in the comment above :data:`ABBREVIATIONS`)."""
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


# ---------------------------------------------------------------- JSONL


def jsonl_records(path: Path) -> Iterator[tuple[str, object, str | None]]:
    """The records of a JSONL file, one per non-blank line.

    Yields:
        ``(origin, record, None)``, ``origin`` being ``"path:line"`` (lines from 1), or
        ``(origin, None, what is wrong)`` for a line that is not UTF-8 or not JSON. A
        reader that must stop raises ``f"{origin}: {problem}"``; one that may go on
        skips the line and reports it the same way.
    """
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            origin = f"{path}:{number}"
            if not raw.strip():
                continue
            try:
                yield origin, json.loads(raw.decode("utf-8")), None
            except UnicodeDecodeError:
                yield origin, None, "not UTF-8 text"
            except json.JSONDecodeError as err:
                yield origin, None, f"malformed JSON ({err.msg})"
