"""TriviaQA's and SQuAD's releases read as they ship, for ``prep qa`` (:mod:`.qa`).

Two input formats (``--format``):

- ``triviaqa``: a JSON file of TriviaQA's reading-comprehension release, as it comes
  (``qa/wikipedia-train.json``, ``qa/verified-web-dev.json``, ``qa/*-test-without-answers.json``
  ...): ``{"Domain", "VerifiedEval", "Version", "Split", "Data": [{"QuestionId",
  "Question", "Answer": {"Aliases": [...], "Value", ...}, "EntityPages": [{"Filename", ...}],
  "SearchResults": [{"Filename", ...}], ...}]}``, with the documents' text in the evidence
  directory: ``EVIDENCE/wikipedia/<Filename>`` for an entity page, ``EVIDENCE/web/<Filename>``
  for a search result. One example per (question, document), id
  ``"<QuestionId>--<Filename>"``. A ``Wikipedia`` file's documents are its entity pages;
  a ``Web`` file's are its entity pages and its search results, as TriviaQA's own reader
  (``utils/dataset_utils.py``) takes them. There is no gold span: every occurrence of
  every alias in the document is one (distant supervision), matched on the normalised
  text (:func:`normalized_words`) and recorded in original characters. The answers
  written are the aliases as given, plus ``Value`` and any ``HumanAnswers`` (which the
  official script scores against too) that are not among them.
- ``squad``: ``{"data": [{"paragraphs": [{"context", "qas": [{"id", "question",
  "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}``; the gold spans are
  the given ones (``is_impossible`` questions have none).

TriviaQA's official evaluation (``evaluation/triviaqa_evaluation.py``) scores one answer
per key: the ``QuestionId`` in the Wikipedia domain (a question's answer is the best one
over its entity pages), ``"<QuestionId>--<Filename>"`` (the example) in the Web domain;
each example records its key (SQuAD: its id). A file with ``"VerifiedEval": true``
(``verified-*-dev.json``) is read as that script reads it: only the questions whose
``QuestionPartOfVerifiedEval`` is true, and in the Web domain only their documents whose
``DocPartOfVerifiedEval`` is true. A file without answers (``*-test-without-answers.json``:
no ``Answer`` in any question) is written as any valid or test split, with no gold
position, for ``eval-qa`` to write the answers to submit; it cannot be a train split.
Questions and documents left out (:data:`NO_EVIDENCE`: no document to read;
:data:`NOT_VERIFIED`) are counted by reason in the stats, the first few named.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from longformer_fs.conventions import TRIVIAQA

from .fairseq_dataset import PrepError
from .inputs import load_json

# TriviaQA: the document lists each domain's questions are read from (as its own reader
# takes them), and the directory of the evidence each list's files are in.
DOCUMENT_LISTS = {"Wikipedia": ("EntityPages",), "Web": ("EntityPages", "SearchResults")}
EVIDENCE_DIRS = {"EntityPages": "wikipedia", "SearchResults": "web"}
SEPARATOR = "--"  # "<QuestionId>--<Filename>": an example's id, and its key in the Web domain's evaluation
# Why a TriviaQA question or document is left out, as the stats and the report name it.
NO_EVIDENCE = "without evidence"  # no document listed (in a verified file: none verified)
NOT_VERIFIED = "outside the verified evaluation"

# ---------------------------------------------------------------- answer normalisation


def normalized_words(text: str) -> list[tuple[str, int, int]]:
    """TriviaQA's normalised words of ``text`` with their character spans (distant supervision)."""
    return TRIVIAQA.words(text)


def normalize_answer(text: str) -> str:
    """TriviaQA's answer normalisation (``"The Beatles!"`` -> ``"beatles"``)."""
    return TRIVIAQA.normalize(text)


def find_answer_spans(context: str, aliases: Iterable[str]) -> list[tuple[int, int]]:
    """Every occurrence of every alias in ``context``, compared after normalisation.

    An alias matches a run of whole normalised words, so ``"art"`` never matches inside
    ``"party"`` and ``"The Beatles"`` matches ``"beatles'"``.

    Returns:
        Sorted, distinct character spans ``[start, end)`` of ``context``, from the first
        matched word's first character to the last one's last.
    """
    words = normalized_words(context)
    text = [word for word, _, _ in words]
    where: dict[str, list[int]] = defaultdict(list)
    for i, word in enumerate(text):
        where[word].append(i)
    spans = set()
    for alias in aliases:
        target = [word for word, _, _ in normalized_words(alias)]
        if not target:
            continue
        n = len(target)
        for i in where.get(target[0], ()):
            if text[i : i + n] == target:
                spans.add((words[i][1], words[i + n - 1][2]))
    return sorted(spans)


# ---------------------------------------------------------------- examples


@dataclass(frozen=True)
class QaExample:
    """One question about one context.

    Attributes:
        id: unique within its split.
        key: what the dataset's official evaluation scores it under; examples sharing a
            key are answered once, by the best of their predictions (TriviaQA's Wikipedia
            domain: the ``QuestionId``; otherwise the id).
        answers: the gold answers as given (TriviaQA: its aliases); None when the input
            gives none (a test file released without answers).
        spans: gold character spans ``[start, end)`` in ``context``, sorted and distinct.
    """

    id: str
    key: str
    question: str
    answers: tuple[str, ...] | None
    context: str
    spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Dropped:
    """A question or document of the input left out: where it is, and why."""

    origin: str
    reason: str


@dataclass
class QaInput:
    """One input file, read and checked.

    Attributes:
        groups: per example, what splitting keeps together (TriviaQA: its question id;
            SQuAD: its article).
        examples: the examples, in input order (TriviaQA reads each document as its
            example is taken).
        answered: False for a file that gives no answers (TriviaQA's
            ``*-test-without-answers.json``).
        dropped_questions, dropped_documents: what the file holds that no example comes from.
    """

    groups: list[str]
    examples: Iterator[QaExample]
    answered: bool = True
    dropped_questions: list[Dropped] = field(default_factory=list)
    dropped_documents: list[Dropped] = field(default_factory=list)


def _field(obj, key: str, kind: type | tuple[type, ...], where: str):
    """``obj[key]``, checked to be a dict entry of type ``kind``; a PrepError naming ``where`` if not."""
    if not isinstance(obj, dict):
        raise PrepError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise PrepError(f"{where}: no {key!r} key")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise PrepError(f"{where}: {key!r} is {type(value).__name__}, expected {expected}")
    return value


def _strings(obj, key: str, where: str) -> list[str]:
    values = _field(obj, key, list, where)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise PrepError(f"{where}: {key}[{i}] is {type(value).__name__}, expected str")
    return values


def _unique_ids(ids: Iterable[tuple[str, str]], path: Path) -> None:
    seen = set()
    for example_id, where in ids:
        if example_id in seen:
            raise PrepError(f"{where}: example id {example_id!r} occurs twice in {path}")
        seen.add(example_id)


def _triviaqa_answers(entry: dict, where: str) -> tuple[str, ...]:
    """A question's aliases, then its ``Value`` and ``HumanAnswers`` that are not among them."""
    answer = _field(entry, "Answer", dict, where)
    answers = _strings(answer, "Aliases", f"{where}: Answer")
    value = answer.get("Value")
    extra = [value] if isinstance(value, str) else []
    if "HumanAnswers" in answer:
        extra += _strings(answer, "HumanAnswers", f"{where}: Answer")
    for text in extra:
        if text not in answers:
            answers.append(text)
    return tuple(answers)


def read_triviaqa(path: Path, evidence: Path) -> QaInput:
    """A file of TriviaQA's release, with each example's question id as its group.

    The whole file's structure and every evidence file's existence are checked before
    the first example is yielded; documents are read as the examples are. A file without
    ``Domain`` (written by hand) is read as the Wikipedia domain.
    """
    path = Path(path)
    release = load_json(path)
    data = _field(release, "Data", list, str(path))
    domain = _field(release, "Domain", str, str(path)) if "Domain" in release else "Wikipedia"
    if domain not in DOCUMENT_LISTS:
        raise PrepError(f"{path}: Domain is {domain!r}; TriviaQA's domains are {' and '.join(DOCUMENT_LISTS)}")
    verified = _field(release, "VerifiedEval", bool, str(path)) if "VerifiedEval" in release else False
    # A test file gives no question an answer; in any other file a missing one is an error.
    answered = any(isinstance(entry, dict) and "Answer" in entry for entry in data)
    checked = []  # (example id, key, where, question, answers, document file, question id)
    questions_out, documents_out = [], []
    for i, entry in enumerate(data):
        where = f"{path}: Data[{i}]"
        qid = _field(entry, "QuestionId", str, where)
        where = f"{where} (QuestionId {qid})"
        if verified and not _field(entry, "QuestionPartOfVerifiedEval", bool, where):
            questions_out.append(Dropped(where, NOT_VERIFIED))
            continue
        question = _field(entry, "Question", str, where)
        answers = _triviaqa_answers(entry, where) if answered else None
        documents = []
        for listed in DOCUMENT_LISTS[domain]:
            for k, document in enumerate(_field(entry, listed, list, where) if listed in entry else []):
                origin = f"{where}: {listed}[{k}]"
                filename = _field(document, "Filename", str, origin)
                # The Wikipedia domain scores a question, whatever its pages' flags say.
                if verified and domain == "Web" and not _field(document, "DocPartOfVerifiedEval", bool, origin):
                    documents_out.append(Dropped(f"{origin} ({filename})", NOT_VERIFIED))
                    continue
                file = Path(evidence) / EVIDENCE_DIRS[listed] / filename
                if not file.is_file():
                    raise PrepError(f"{origin}: evidence file {file} not found")
                documents.append((filename, file))
        if not documents:
            questions_out.append(Dropped(where, NO_EVIDENCE))
        for filename, file in documents:
            example_id = f"{qid}{SEPARATOR}{filename}"
            key = qid if domain == "Wikipedia" else example_id
            checked.append((example_id, key, where, question, answers, file, qid))
    _unique_ids(((c[0], c[2]) for c in checked), path)

    def examples() -> Iterator[QaExample]:
        for example_id, key, where, question, answers, file, _ in checked:
            try:
                context = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise PrepError(f"{where}: evidence file {file} is not UTF-8 text") from None
            spans = tuple(find_answer_spans(context, answers or ()))
            yield QaExample(example_id, key, question, answers, context, spans)

    return QaInput([c[-1] for c in checked], examples(), answered, questions_out, documents_out)


def read_squad(path: Path) -> QaInput:
    """SQuAD-style JSON: the examples, with the given spans, each keyed by its id; its
    group for splitting is its article (the title, or the article's index without one)."""
    path = Path(path)
    examples = []
    for a, article in enumerate(_field(load_json(path), "data", list, str(path))):
        title = article.get("title") if isinstance(article, dict) else None
        group = title if isinstance(title, str) else f"data[{a}]"
        for p, paragraph in enumerate(_field(article, "paragraphs", list, f"{path}: data[{a}]")):
            where_p = f"{path}: data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, where_p)
            for q, qa in enumerate(_field(paragraph, "qas", list, where_p)):
                where = f"{where_p}.qas[{q}]"
                example_id = _field(qa, "id", (str, int), where)
                where = f"{where} (id {example_id!r})"
                question = _field(qa, "question", str, where)
                impossible = qa.get("is_impossible", False)
                answers, spans = [], set()
                for k, answer in enumerate([] if impossible else _field(qa, "answers", list, where)):
                    text = _field(answer, "text", str, f"{where}: answers[{k}]")
                    start = _field(answer, "answer_start", int, f"{where}: answers[{k}]")
                    if start < 0 or context[start : start + len(text)] != text:
                        raise PrepError(
                            f"{where}: answers[{k}]: answer_start {start} does not point at its text {text!r}"
                        )
                    if text not in answers:
                        answers.append(text)
                    spans.add((start, start + len(text)))
                example = QaExample(
                    str(example_id), str(example_id), question, tuple(answers), context, tuple(sorted(spans))
                )
                examples.append((example, where, group))
    _unique_ids(((e.id, where) for e, where, _ in examples), path)
    return QaInput([group for _, _, group in examples], (e for e, _, _ in examples))
