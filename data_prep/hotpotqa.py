"""HotpotQA as fairseq datasets (``longformer-fs prep hotpotqa``): the files as released,
``hotpot_train_v1.1.json``, ``hotpot_dev_distractor_v1.json``, ``hotpot_dev_fullwiki_v1.json``
and ``hotpot_test_fullwiki_v1.json``.

Input: HotpotQA's JSON, a list of ``{"_id", "question", "answer", "context": [[title,
[sentence, ...]], ...], "supporting_facts": [[title, sentence index], ...]}`` (also
``"type"`` and ``"level"``, not read). The distractor setting gives ten paragraphs per
question; the full-wiki one the paragraphs its retriever found, which may miss the gold
ones, or be none at all. The test file has no ``answer`` and ``supporting_facts``: a
file with neither on any record is a split without labels (below), which only ``--test``
may be; a file that has them on some records and not on others is an error.

A supporting fact whose title is not among the record's paragraphs (common in the
full-wiki setting), or whose sentence index is past its paragraph's last sentence (a few
in the train file), labels nothing, as in HotpotQA's own preprocessing; the stats count
it by reason (:data:`TITLE_NOT_IN_CONTEXT`, :data:`SENTENCE_OUT_OF_RANGE`), with
examples. Its record is kept, even with no supporting fact left (its ``[p]`` and ``[s]``
labels are then all 0, and the stats count it): it still trains the answer and type
heads, and the official script scores every question of a gold file. A record without
paragraphs (``prepro.py`` notes some in the full-wiki files) is kept too, as its
question alone; the stats count them.

The model input of an example is one sequence holding every paragraph (paper, Appendix B)::

    <s> [q] question [/q] [p] title1 [s] sentence [s] sentence ... [p] title2 [s] ...

where ``[q] [/q] [p] [s]`` (:data:`HOTPOTQA_SYMBOLS`) are appended to the model's
``dict.txt`` as ``prep wikihop`` does (extend the model with ``convert-roberta
--add-tokens``). The paragraph's title leads it, between ``[p]`` and its first ``[s]``:
the titles are what bridge questions name, and they cost a few tokens. A sequence longer
than ``--max-tokens`` is cut there; paragraphs and sentences whose marker falls past the
cut are gone (the stats count the examples cut and the answers lost).

Labels: the question type (0: span, 1: yes, 2: no, from the answer text), one 0/1 per
kept ``[p]`` (a supporting paragraph) and per kept ``[s]`` (a supporting sentence), and
the answer's token spans. HotpotQA gives the answer as text: every occurrence of it in a
supporting sentence is gold (matched after TriviaQA-style normalisation, whole words),
or, when no supporting sentence holds it, every occurrence in any sentence; the task
trains them with the OR loss over occurrences, as for TriviaQA. Yes/no answers have no span.

Output layout, one item per example in every file of a split::

    dict.txt                       the model's dictionary + HOTPOTQA_SYMBOLS
    {split}.tokens.{bin,idx}       the sequence above, as model ids
    {split}.offsets.{bin,idx}      2 int32 per token: its characters [start, end) in the
                                   example's "context" (-1 -1 outside the sentences)
    {split}.starts/.ends.{bin,idx} int32 token positions of every gold answer span ([-1]: none)
    {split}.paragraphs.{bin,idx}   0/1 per kept [p], in order
    {split}.sentences.{bin,idx}    0/1 per kept [s], in order
    {split}.qtype.{bin,idx}        [0 span | 1 yes | 2 no]
    {split}.examples.jsonl         {"_id", "answer", "type", "supporting_facts", "titles",
                                    "sentence_counts", "context"}: the gold record (scored by
                                    the official rules, skipped facts included, as the
                                    official script reads them) and what maps [p]/[s] back
                                    to [title, sentence index]; "context" is every kept
                                    sentence, each after one space, concatenated
    stats.json, prep.json

A split without labels has only the model's inputs, ``tokens`` and ``offsets``, and
``examples.jsonl`` rows without ``answer``, ``type`` and ``supporting_facts``; its stats
say ``"labelled": false``. ``eval-hotpotqa`` writes its predictions and does not score it.

``--evidence FILE`` (the two-stage variant) keeps, per example, only the paragraphs
whose titles ``FILE`` lists for its id (``{id: [title, ...]}``, as ``eval-hotpotqa
--write-evidence`` writes it), in their original order; the gold record is unchanged, so
supporting facts in dropped paragraphs count as missed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from longformer_fs.conventions import BOS, HOTPOTQA_SYMBOLS, PrepKind

from .fairseq_dataset import PrepError, SplitFiles, aligned_table, batched, file_stamp, previous_stats
from .inputs import load_json
from .qa import char_spans_to_tokens
from .qa_sources import find_answer_spans
from .wikihop import WikihopConfig, check_config, read_splits, write_examples
from .wikihop import input_manifest as wikihop_inputs

KIND = PrepKind.HOTPOTQA
BATCH_EXAMPLES = 16  # examples per tokenizer call
QUESTION_TYPES = ("span", "yes", "no")  # the type head's classes, in order
LABELS = ("answer", "supporting_facts")  # the keys a test file lacks
# Why a supporting fact labels nothing (its record is kept), as the stats name it.
TITLE_NOT_IN_CONTEXT, SENTENCE_OUT_OF_RANGE = "title not in the context", "sentence index out of range"
REPORTED = 50  # examples of skipped facts kept in stats.json, per split


@dataclass(frozen=True)
class HotpotExample:
    """One HotpotQA record, checked.

    Attributes:
        paragraphs: ``(title, sentences)`` pairs, in the record's order (none in a few
            full-wiki records).
        answer, qtype: the answer text and its index into :data:`QUESTION_TYPES`; None
            in a file without labels.
        supporting: the supporting facts that label a sentence, as ``(title, sentence
            index)`` pairs (empty without labels).
        record: the gold fields the official metrics read (``_id``, ``answer``,
            ``supporting_facts``), as given; None without labels.
        skipped_facts: the record's facts that label nothing, each ``(reason,
            {"origin", "reason"})``: :data:`TITLE_NOT_IN_CONTEXT` or
            :data:`SENTENCE_OUT_OF_RANGE`, and where and what it is, for the stats.
    """

    id: str
    question: str
    answer: str | None
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]
    supporting: frozenset
    qtype: int | None
    record: dict | None = field(compare=False)
    skipped_facts: tuple = field(default=(), compare=False)

    @property
    def labelled(self) -> bool:
        """Whether the record has an answer and supporting facts (all but the test file's do)."""
        return self.record is not None


def question_type(answer: str) -> int:
    """0 (span), 1 (yes) or 2 (no): HotpotQA's comparison questions answer "yes" or "no"."""
    text = answer.strip().lower()
    return QUESTION_TYPES.index(text) if text in ("yes", "no") else 0


def _check_record(entry, where: str, labelled: bool) -> HotpotExample:
    """One record as a :class:`HotpotExample`; ``labelled``: the file has answers and
    supporting facts (its first record does)."""
    if not isinstance(entry, dict):
        raise PrepError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    if "_id" in entry:
        where = f"{where} (_id {entry['_id']!r})"
    if not labelled and (present := [k for k in LABELS if k in entry]):
        raise PrepError(
            f"{where}: has {present[0]!r}, but record 0 has neither {' nor '.join(map(repr, LABELS))}; a file has "
            "labels on every record (train, dev) or on none (test): fix the file"
        )
    missing = [k for k in ("_id", "question", "context", *(LABELS if labelled else ())) if k not in entry]
    if missing:
        hint = ""
        if labelled and all(k in missing for k in LABELS):
            hint = ", but record 0 has them; a file has labels on every record (train, dev) or on none (test)"
        raise PrepError(f"{where}: no {', '.join(repr(k) for k in missing)} key{hint}")
    strings = ("_id", "question", "answer") if labelled else ("_id", "question")
    for key in strings:
        if not isinstance(entry[key], str):
            raise PrepError(f"{where}: {key!r} is {type(entry[key]).__name__}, expected a string")
    paragraphs = []
    for k, paragraph in enumerate(entry["context"] if isinstance(entry["context"], list) else [None]):
        ok = (
            isinstance(paragraph, list)
            and len(paragraph) == 2
            and isinstance(paragraph[0], str)
            and isinstance(paragraph[1], list)
            and all(isinstance(s, str) for s in paragraph[1])
        )
        if not ok:
            raise PrepError(f"{where}: context[{k}] is not [title, [sentence, ...]]")
        paragraphs.append((paragraph[0], tuple(paragraph[1])))
    if not labelled:
        return HotpotExample(entry["_id"], entry["question"], None, tuple(paragraphs), frozenset(), None, None)
    sizes = {}
    for title, sentences in paragraphs:
        sizes.setdefault(title, len(sentences))  # a repeated title: its first paragraph
    facts = entry["supporting_facts"]
    if not isinstance(facts, list):
        raise PrepError(f"{where}: 'supporting_facts' must be a list of [title, sentence index]")
    supporting, skipped = set(), []
    for fact in facts:
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str) and type(fact[1]) is int):
            raise PrepError(f"{where}: supporting fact {fact!r} is not [title, sentence index]")
        # HotpotQA's prepro.py labels the sentences it finds in the context, so a fact
        # that points at none is ignored there too.
        if fact[0] not in sizes:
            reason, detail = TITLE_NOT_IN_CONTEXT, ""
        elif not 0 <= fact[1] < sizes[fact[0]]:
            reason, detail = SENTENCE_OUT_OF_RANGE, f" ({fact[0]!r} has {sizes[fact[0]]} sentences)"
        else:
            supporting.add(tuple(fact))
            continue
        skipped.append((reason, {"origin": where, "reason": f"supporting fact {fact!r}: {reason}{detail}"}))
    record = {"_id": entry["_id"], "answer": entry["answer"], "supporting_facts": facts}
    return HotpotExample(
        entry["_id"],
        entry["question"],
        entry["answer"],
        tuple(paragraphs),
        frozenset(supporting),
        question_type(entry["answer"]),
        record,
        tuple(skipped),
    )


def read_hotpotqa(path: Path) -> list[HotpotExample]:
    """Every record of a HotpotQA JSON file, checked; a PrepError naming the bad record if not.

    The file is labelled when its first record has an answer or supporting facts; every
    record must then have both, and otherwise neither."""
    data = load_json(path)
    if not isinstance(data, list):
        raise PrepError(f"{path}: expected a JSON list of examples, got {type(data).__name__}")
    labelled = bool(data) and isinstance(data[0], dict) and any(k in data[0] for k in LABELS)
    examples, seen = [], set()
    for i, entry in enumerate(data):
        example = _check_record(entry, f"{path}: record {i}", labelled)
        if example.id in seen:
            raise PrepError(f"{path}: record {i}: _id {example.id!r} occurs twice")
        seen.add(example.id)
        examples.append(example)
    return examples


def read_evidence(paths: list[Path]) -> dict[str, list[str]]:
    """``{id: [title, ...]}`` merged from the ``--evidence`` files."""
    evidence = {}
    for path in paths:
        data = load_json(path)
        ok = isinstance(data, dict) and all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in data.values()
        )
        if not ok:
            raise PrepError(f"--evidence: {path} is not {{id: [title, ...]}} (eval-hotpotqa --write-evidence)")
        evidence.update(data)
    return evidence


def select_paragraphs(example: HotpotExample, titles: list[str], source) -> HotpotExample:
    """``example`` with only the paragraphs named in ``titles``, in their order in the record."""
    kept = tuple(p for p in example.paragraphs if p[0] in set(titles))
    if example.paragraphs and not kept:
        raise PrepError(f"--evidence: {source}: _id {example.id!r}: none of {titles!r} is a title of its context")
    return replace(example, paragraphs=kept)


@dataclass(frozen=True)
class HotpotqaConfig(WikihopConfig):
    """What ``prep hotpotqa`` reads: WikiHop's fields (the files are read and split the
    same way; ``max_tokens`` is where sequences are cut, and the cuts are counted) and the
    evidence files of the two-stage variant.

    Attributes:
        evidence: ``eval-hotpotqa --write-evidence`` files: keep only their paragraphs.
    """

    evidence: tuple[Path, ...] = ()


def input_manifest(cfg: HotpotqaConfig) -> dict:
    """``prep wikihop``'s record of the inputs (the same fields), and the evidence files."""
    return {**wikihop_inputs(cfg), "evidence": [file_stamp(p) for p in cfg.evidence]}


@dataclass(frozen=True)
class Encoded:
    """One example as model input.

    Attributes:
        tokens: (n,) int64 model ids, at most ``max_tokens``.
        offsets: (n, 2) int32 characters of ``context`` per token, -1 -1 outside sentences.
        spans: (k, 2) int32 gold answer token spans (inclusive), within the sequence.
        paragraph_labels, sentence_labels: 0/1 per kept ``[p]`` / ``[s]``.
        titles, sentence_counts: the kept paragraphs' titles and kept sentences.
        context: every kept sentence, each after one space.
        truncated: the sequence was cut; lost_answer: gold spans existed only past the cut.
    """

    tokens: np.ndarray
    offsets: np.ndarray
    spans: np.ndarray
    paragraph_labels: list[int]
    sentence_labels: list[int]
    titles: list[str]
    sentence_counts: list[int]
    context: str
    truncated: bool
    lost_answer: bool


def encode_example(example: HotpotExample, encoded, ids: dict[str, int], max_tokens: int) -> Encoded:
    """Lay out one example (module docstring) from its encoded pieces.

    Args:
        encoded: an iterator over ``(ids, offsets)`` of the question, then per paragraph
            its title and each sentence, each encoded after a space.
        ids: the model ids of :data:`HOTPOTQA_SYMBOLS`.
    """
    question = next(encoded)[0]
    tokens = [np.array([BOS, ids["[q]"]]), question, np.array([ids["[/q]"]])]
    offsets = [np.full((len(question) + 3, 2), -1)]
    position, context = len(question) + 3, ""
    paragraph_labels, sentence_labels, titles, counts = [], [], [], []
    supporting_titles = {title for title, _ in example.supporting}
    found = {True: [], False: []}  # gold spans in supporting / other sentences
    for title, sentences in example.paragraphs:
        title_ids = next(encoded)[0]
        tokens += [np.array([ids["[p]"]]), title_ids]
        offsets.append(np.full((len(title_ids) + 1, 2), -1))
        paragraph_labels.append(int(title in supporting_titles))
        titles.append(title)
        counts.append(0)
        position += len(title_ids) + 1
        for index, sentence in enumerate(sentences):
            sentence_ids, sentence_offsets = next(encoded)
            piece = " " + sentence
            tokens += [np.array([ids["[s]"]]), sentence_ids]
            offsets += [np.full((1, 2), -1), sentence_offsets + len(context)]
            supporting = (title, index) in example.supporting
            sentence_labels.append(int(supporting))
            counts[-1] += 1
            if example.qtype == 0:
                local = char_spans_to_tokens(sentence_offsets, find_answer_spans(piece, [example.answer]))
                found[supporting] += [pair + position + 1 for pair in local]
            context += piece
            position += len(sentence_ids) + 1
    tokens, offsets = np.concatenate(tokens).astype(np.int64), np.concatenate(offsets).astype(np.int32)
    gold = np.array(found[True] or found[False], dtype=np.int32).reshape(-1, 2)
    kept = gold[gold[:, 1] < max_tokens]
    # Markers past the cut are gone with their labels; a paragraph's count keeps only its
    # sentences whose [s] survived.
    markers = tokens[:max_tokens]
    paragraphs = int((markers == ids["[p]"]).sum())
    sentences = int((markers == ids["[s]"]).sum())
    kept_counts, remaining = [], sentences
    for count in counts[:paragraphs]:
        kept_counts.append(min(count, remaining))
        remaining -= kept_counts[-1]
    return Encoded(
        tokens[:max_tokens],
        offsets[:max_tokens],
        kept,
        paragraph_labels[:paragraphs],
        sentence_labels[:sentences],
        titles[:paragraphs],
        kept_counts,
        context,
        len(tokens) > max_tokens,
        len(gold) > 0 and len(kept) == 0,
    )


def _pieces(example: HotpotExample) -> list[str]:
    """The texts :func:`encode_example` reads, in its order, each after a space."""
    texts = [example.question] + [t for title, sents in example.paragraphs for t in (title, *sents)]
    return [" " + t for t in texts]


def prepare_hotpotqa(cfg: HotpotqaConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    check_config(cfg)
    for path in cfg.evidence:
        if not Path(path).is_file():
            raise PrepError(f"--evidence: {path} not found")
    out = Path(out)
    encoder = cfg.subword.load()
    inputs = json.loads(json.dumps(input_manifest(cfg)))
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    data = read_splits(cfg, reader=read_hotpotqa)
    for split in ("train", "valid"):
        # fairseq-train learns from train and validates on valid: both need labels.
        if split in data and not data[split][0].labelled:
            given = f"--{split}: {cfg.files[split]}" if cfg.input is None else f"--input: {cfg.input}"
            raise PrepError(
                f"{given} has no 'answer' or 'supporting_facts' (HotpotQA's test file?), which the {split} split "
                "needs; give a file without them as --test"
            )
    if cfg.evidence:
        evidence = read_evidence(list(cfg.evidence))
        for split, examples in data.items():
            absent = [ex.id for ex in examples if ex.id not in evidence]
            if absent:
                raise PrepError(f"--evidence: no paragraphs listed for _id {absent[0]!r} ({len(absent)} in {split})")
            data[split] = [select_paragraphs(ex, evidence[ex.id], cfg.evidence) for ex in examples]
    return write_examples(out, KIND, inputs, cfg, data, encoder, HOTPOTQA_SYMBOLS, _write_split)


def _write_split(directory, split, examples, source, encoder, symbol_ids, dictionary_size, max_tokens, bar) -> dict:
    """Tokenize and write one split's files (only the inputs for a split without labels); returns its stats."""
    labelled = examples[0].labelled  # a file has labels on every record or on none
    signed = SplitFiles.SIGNED
    fields = {"tokens": dictionary_size, "offsets": signed}
    if labelled:
        fields |= {"starts": signed, "ends": signed, "paragraphs": 3, "sentences": 3, "qtype": 3}
    counts, skipped = Counter(), []
    with SplitFiles(directory, split, fields) as files:
        for batch in batched(examples, BATCH_EXAMPLES):
            encoded = iter(encoder.encode_with_offsets([t for ex in batch for t in _pieces(ex)]))
            for ex in batch:
                item = encode_example(ex, encoded, symbol_ids, max_tokens)
                # A record without paragraphs is its question alone, which must fit whole.
                if symbol_ids["[p]" if ex.paragraphs else "[/q]"] not in item.tokens:
                    raise PrepError(
                        f"{source}: _id {ex.id!r}: the question leaves no room for a paragraph in "
                        f"--max-tokens {max_tokens}"
                    )
                row, items = {"_id": ex.id}, {"tokens": item.tokens, "offsets": item.offsets.reshape(-1)}
                if labelled:
                    # [-1] for no span: the task pads with -1 anyway, and a split without any
                    # span would otherwise write an empty .bin, which fairseq cannot map.
                    spans = item.spans if len(item.spans) else np.full((1, 2), -1)
                    row |= {**ex.record, "type": QUESTION_TYPES[ex.qtype]}
                    items |= {
                        "starts": spans[:, 0],
                        "ends": spans[:, 1],
                        "paragraphs": np.array(item.paragraph_labels),
                        "sentences": np.array(item.sentence_labels),
                        "qtype": np.array([ex.qtype]),
                    }
                    counts["answer_lost_to_truncation"] += item.lost_answer
                    counts["span_without_match"] += ex.qtype == 0 and len(item.spans) == 0 and not item.lost_answer
                    counts["no_supporting_fact"] += not ex.supporting
                    counts[QUESTION_TYPES[ex.qtype]] += 1
                    skipped += ex.skipped_facts
                row |= {"titles": item.titles, "sentence_counts": item.sentence_counts, "context": item.context}
                files.add(row, len(item.tokens), **items)
                counts["truncated"] += item.truncated
                counts["empty_context"] += not ex.paragraphs
            bar.update(len(batch))
    stats = {
        "examples": len(examples),
        **files.length_stats(),
        "labelled": labelled,
        "truncated": counts["truncated"],
        "empty_context": counts["empty_context"],
    }
    if labelled:
        stats |= {
            "answer_lost_to_truncation": counts["answer_lost_to_truncation"],
            "span_without_match": counts["span_without_match"],
            "types": {t: counts[t] for t in QUESTION_TYPES},
            "skipped_facts": {
                "count": len(skipped),
                "by_reason": dict(Counter(reason for reason, _ in skipped)),
                "examples": [example for _, example in skipped[:REPORTED]],
            },
            "no_supporting_fact": counts["no_supporting_fact"],
        }
    return stats


def stats_table(result: dict) -> str:
    """One row per split: examples, lengths, how many were cut at ``max_tokens`` and lost
    their answer, and the supporting facts skipped ("-" where a split has no labels)."""
    cut = f"cut at {result['max_tokens']}"
    rows = [("split", "examples", *SplitFiles.LENGTH_HEADERS, cut, "answer cut", "no match", "yes/no", "facts skipped")]
    for split, st in result["splits"].items():
        labels = ("-",) * 4
        if st.get("labelled", True):  # a run from before unlabelled splits has no such key
            labels = (
                f"{st['answer_lost_to_truncation']:,}",
                f"{st['span_without_match']:,}",
                f"{st['types']['yes']:,}/{st['types']['no']:,}",
                f"{st.get('skipped_facts', {}).get('count', 0):,}",
            )
        rows.append((split, f"{st['examples']:,}", *SplitFiles.length_cells(st), f"{st['truncated']:,}", *labels))
    return aligned_table(rows)
