"""HotpotQA, distractor setting, as fairseq datasets (``longformer-fs prep hotpotqa``).

Input: HotpotQA's JSON, a list of ``{"_id", "question", "answer", "type", "level",
"context": [[title, [sentence, ...]], ...], "supporting_facts": [[title, sentence index],
...]}`` (ten paragraphs per question in the distractor setting).

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
                                    the official rules) and what maps [p]/[s] back to
                                    [title, sentence index]; "context" is every kept
                                    sentence, each after one space, concatenated
    stats.json, prep.json

``--evidence FILE`` (the two-stage variant) keeps, per example, only the paragraphs
whose titles ``FILE`` lists for its id (``{id: [title, ...]}``, as ``eval-hotpotqa
--write-evidence`` writes it), in their original order; the gold record is unchanged, so
supporting facts in dropped paragraphs count as missed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from longformer_fs.conventions import BOS, HOTPOTQA_FILES, HOTPOTQA_SYMBOLS

from .fairseq_dataset import PrepError, SplitFiles, aligned_table, batched, file_stamp, previous_stats
from .inputs import load_json
from .qa import char_spans_to_tokens, find_answer_spans
from .wikihop import WikihopConfig, check_config, read_splits, write_examples
from .wikihop import input_manifest as wikihop_inputs

KIND = "hotpotqa"
BATCH_EXAMPLES = 16  # examples per tokenizer call
QUESTION_TYPES = ("span", "yes", "no")  # the type head's classes, in order


@dataclass(frozen=True)
class HotpotExample:
    """One HotpotQA record, checked.

    Attributes:
        paragraphs: ``(title, sentences)`` pairs, in the record's order.
        supporting: the supporting facts as ``(title, sentence index)`` pairs.
        qtype: index into :data:`QUESTION_TYPES`.
        record: the gold fields the official metrics read (``_id``, ``answer``,
            ``supporting_facts``), as given.
    """

    id: str
    question: str
    answer: str
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]
    supporting: frozenset
    qtype: int
    record: dict = field(compare=False)


def question_type(answer: str) -> int:
    """0 (span), 1 (yes) or 2 (no): HotpotQA's comparison questions answer "yes" or "no"."""
    text = answer.strip().lower()
    return QUESTION_TYPES.index(text) if text in ("yes", "no") else 0


def _check_record(entry, where: str) -> HotpotExample:
    if not isinstance(entry, dict):
        raise PrepError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    if "_id" in entry:
        where = f"{where} (_id {entry['_id']!r})"
    missing = [k for k in ("_id", "question", "answer", "context", "supporting_facts") if k not in entry]
    if missing:
        raise PrepError(f"{where}: no {', '.join(repr(k) for k in missing)} key")
    for key in ("_id", "question", "answer"):
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
    if not paragraphs:
        raise PrepError(f"{where}: empty context")
    sizes = {}
    for title, sentences in paragraphs:
        sizes.setdefault(title, len(sentences))  # a repeated title: its first paragraph
    facts = entry["supporting_facts"]
    if not isinstance(facts, list):
        raise PrepError(f"{where}: 'supporting_facts' must be a list of [title, sentence index]")
    for fact in facts:
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str) and type(fact[1]) is int):
            raise PrepError(f"{where}: supporting fact {fact!r} is not [title, sentence index]")
        if fact[0] not in sizes:
            raise PrepError(f"{where}: supporting fact {fact!r} names a title not in the context")
        if not 0 <= fact[1] < sizes[fact[0]]:
            raise PrepError(
                f"{where}: supporting fact {fact!r}: sentence index out of range ({fact[0]!r} has "
                f"{sizes[fact[0]]} sentences)"
            )
    record = {"_id": entry["_id"], "answer": entry["answer"], "supporting_facts": facts}
    return HotpotExample(
        entry["_id"],
        entry["question"],
        entry["answer"],
        tuple(paragraphs),
        frozenset(map(tuple, facts)),
        question_type(entry["answer"]),
        record,
    )


def read_hotpotqa(path: Path) -> list[HotpotExample]:
    """Every record of a HotpotQA JSON file, checked; a PrepError naming the bad record if not."""
    data = load_json(path)
    if not isinstance(data, list):
        raise PrepError(f"{path}: expected a JSON list of examples, got {type(data).__name__}")
    examples, seen = [], set()
    for i, entry in enumerate(data):
        example = _check_record(entry, f"{path}: record {i}")
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
    if not kept:
        raise PrepError(f"--evidence: {source}: _id {example.id!r}: none of {titles!r} is a title of its context")
    return HotpotExample(
        example.id, example.question, example.answer, kept, example.supporting, example.qtype, example.record
    )


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
    outputs = SplitFiles.outputs(HOTPOTQA_FILES)
    if (previous := previous_stats(out, KIND, inputs, outputs, force, log)) is not None:
        return previous

    data = read_splits(cfg, reader=read_hotpotqa)
    if cfg.evidence:
        evidence = read_evidence(list(cfg.evidence))
        for split, examples in data.items():
            absent = [ex.id for ex in examples if ex.id not in evidence]
            if absent:
                raise PrepError(f"--evidence: no paragraphs listed for _id {absent[0]!r} ({len(absent)} in {split})")
            data[split] = [select_paragraphs(ex, evidence[ex.id], cfg.evidence) for ex in examples]
    return write_examples(out, KIND, inputs, outputs, cfg, data, encoder, HOTPOTQA_SYMBOLS, _write_split)


def _write_split(directory, split, examples, source, encoder, symbol_ids, dictionary_size, max_tokens, bar) -> dict:
    """Tokenize and write one split's files; returns its stats."""
    signed = SplitFiles.SIGNED
    fields = {"tokens": dictionary_size, "offsets": signed, "starts": signed, "ends": signed}
    fields |= {"paragraphs": 3, "sentences": 3, "qtype": 3}
    counts = Counter()
    with SplitFiles(directory, split, fields) as files:
        for batch in batched(examples, BATCH_EXAMPLES):
            encoded = iter(encoder.encode_with_offsets([t for ex in batch for t in _pieces(ex)]))
            for ex in batch:
                item = encode_example(ex, encoded, symbol_ids, max_tokens)
                if symbol_ids["[p]"] not in item.tokens:
                    raise PrepError(
                        f"{source}: _id {ex.id!r}: the question leaves no room for a paragraph in "
                        f"--max-tokens {max_tokens}"
                    )
                # [-1] for no span: the task pads with -1 anyway, and a split without any
                # span would otherwise write an empty .bin, which fairseq cannot map.
                spans = item.spans if len(item.spans) else np.full((1, 2), -1)
                row = {
                    **ex.record,
                    "type": QUESTION_TYPES[ex.qtype],
                    "titles": item.titles,
                    "sentence_counts": item.sentence_counts,
                    "context": item.context,
                }
                files.add(
                    row,
                    len(item.tokens),
                    tokens=item.tokens,
                    offsets=item.offsets.reshape(-1),
                    starts=spans[:, 0],
                    ends=spans[:, 1],
                    paragraphs=np.array(item.paragraph_labels),
                    sentences=np.array(item.sentence_labels),
                    qtype=np.array([ex.qtype]),
                )
                counts["truncated"] += item.truncated
                counts["answer_lost_to_truncation"] += item.lost_answer
                counts["span_without_match"] += ex.qtype == 0 and len(item.spans) == 0 and not item.lost_answer
                counts[QUESTION_TYPES[ex.qtype]] += 1
            bar.update(len(batch))
    return {
        "examples": len(examples),
        **files.length_stats(),
        "truncated": counts["truncated"],
        "answer_lost_to_truncation": counts["answer_lost_to_truncation"],
        "span_without_match": counts["span_without_match"],
        "types": {t: counts[t] for t in QUESTION_TYPES},
    }


def stats_table(result: dict) -> str:
    """One row per split: examples, lengths, how many were cut at ``max_tokens`` and lost their answer."""
    cut = f"cut at {result['max_tokens']}"
    rows = [("split", "examples", *SplitFiles.LENGTH_HEADERS, cut, "answer cut", "no match", "yes/no")]
    for split, st in result["splits"].items():
        rows.append(
            (
                split,
                f"{st['examples']:,}",
                *SplitFiles.length_cells(st),
                f"{st['truncated']:,}",
                f"{st['answer_lost_to_truncation']:,}",
                f"{st['span_without_match']:,}",
                f"{st['types']['yes']:,}/{st['types']['no']:,}",
            )
        )
    return aligned_table(rows)
