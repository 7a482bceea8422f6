"""Extractive question answering as fairseq datasets (``longformer-fs prep qa``).

Two input formats (``--format``): TriviaQA's release and SQuAD's, read as they ship by
:mod:`.qa_sources`.

The splits are given files, or one input (``input``) that :func:`~.splits.assign_splits`
cuts by question (TriviaQA: its ``QuestionId``, so a question's documents share a
split) or by article (SQuAD: its title), valid and test getting their fractions and at
least one each.

Each example becomes one or more model inputs (windows) ``<s> question </s> document
part </s>``: the document is truncated so the window fits ``max_tokens`` (the paper's
4096), or, with ``doc_stride``, cut into windows that each fit, window k starting
``min(doc_stride, room)`` document tokens after window k-1 (so they overlap and leave no
gap). A question that leaves no room for any document token is an error.

Output layout, items in the same order in every file of a split (fairseq mmap datasets;
starts, ends and offsets stored as int32)::

    dict.txt                      the model's dictionary
    {split}.tokens.{bin,idx}      per window: its token ids
    {split}.starts.{bin,idx}      per window: int32 positions (in the window) of every gold start
    {split}.ends.{bin,idx}        per window: the matching end positions (inclusive), same length;
                                  both empty when no answer lies wholly inside the window
    {split}.offsets.{bin,idx}     per window: 2 * len(window) int32, the context characters
                                  [start, end) of each token; -1 -1 for <s>, question and </s>
    {split}.windows.jsonl         per window: {"id", "window": k, "question_tokens"}
    {split}.examples.jsonl        per example: {"id", "key", "question", "answers", "context"};
                                  "key": its key in the official evaluation; "answers": null
                                  when the input gives none
    stats.json, prep.json

An example with no gold span wholly inside any of its windows (the answer is not in the
text, only in its truncated part, or, with a stride, too long for the windows' overlap)
is counted and skipped in ``train`` (nothing to learn from) but kept in ``valid``/``test``,
where evaluation must count it as wrong. SQuAD 2.0's unanswerable questions are such
examples: the windows carry no "no answer" target. A split left without an example (an
empty file, or a train split where no answer was found) is an error.

Answers are compared as each dataset's official script compares them
(:data:`longformer_fs.conventions.NORMALIZATIONS`); the manifest records the input format,
so evaluation picks the convention itself (:func:`prepared_format`). The conventions live
in :mod:`longformer_fs.conventions`, shared with the metric, because TriviaQA's distant
supervision must match exactly what its metric calls equal.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import QA_FILES, PrepKind, QaWindow, document_room, make_windows
from longformer_fs.tokenization import SubwordEncoder, SubwordSpec

from . import fairseq_dataset
from .fairseq_dataset import SPLITS, PrepError, SplitFiles, Staging, aligned_table, batched, file_stamp, previous_stats
from .qa_sources import EVIDENCE_DIRS, Dropped, QaExample, QaInput, read_squad, read_triviaqa
from .splits import FRACTIONS_REMEDY, assign_splits, check_split_inputs, split_key

KIND = PrepKind.QA
FORMATS = ("triviaqa", "squad")
# The fields of {split}.examples.jsonl. The manifest records them: a directory written with
# other fields is prepared again, not taken as up to date.
EXAMPLE_FIELDS = ("id", "key", "question", "answers", "context")
BATCH_EXAMPLES = 16  # examples per tokenizer call (the Rust tokenizer parallelises within a call)

REPORTED = 20  # dropped questions and documents named in stats.json

# ---------------------------------------------------------------- windows


def char_spans_to_tokens(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Token spans ``(first, last)`` (inclusive) covering character spans.

    Args:
        offsets: (n, 2) characters ``[start, end)`` of each document token, non-decreasing.
        spans: character spans ``[start, end)``.

    Returns:
        (k, 2) int64, sorted and distinct: ``first`` is the first token ending after the
        span's start, ``last`` the last token starting before its end. A span that
        covers no token (white space only) is dropped.
    """
    if len(spans) == 0 or len(offsets) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    first = np.searchsorted(offsets[:, 1], spans[:, 0], side="right")
    last = np.searchsorted(offsets[:, 0], spans[:, 1], side="left") - 1
    pairs = np.stack([first, last], axis=1)[first <= last]
    return np.unique(pairs, axis=0)


# ---------------------------------------------------------------- the preparation


@dataclass(frozen=True)
class QaPrepConfig:
    """What ``prep qa`` reads and how it cuts.

    Attributes:
        files: split name (``train``/``valid``/``test``) -> input JSON; empty when ``input`` is split.
        evidence: TriviaQA's evidence directory (holding ``wikipedia/`` and ``web/``).
        max_tokens: the most tokens in a window, ``<s>`` and both ``</s>`` included.
        doc_stride: None: truncate each document; N: overlapping windows N tokens apart.
        input: one input JSON to split by ``valid_fraction``/``test_fraction``.
    """

    subword: SubwordSpec
    format: str
    files: dict
    evidence: Path | None = None
    max_tokens: int = 4096
    doc_stride: int | None = None
    input: Path | None = None
    valid_fraction: float = 0.1
    test_fraction: float = 0.1


@dataclass
class QaSplitStats:
    """Counts of one split. Every example read ends in exactly one of ``answer_found``,
    ``answer_not_in_text``, ``answer_in_no_window`` and ``answer_not_given``.

    Attributes:
        examples: examples read.
        windows: windows written.
        answer_found: examples with a gold answer wholly inside at least one window.
        answer_not_in_text: examples none of whose answers occurs in the text.
        answer_in_no_window: in the text, but wholly inside no window (truncated away, or
            cut by the window edges).
        answer_not_given: examples of an input without answers (a test file): written
            with no gold position, and not scored.
        skipped: train examples without a found answer: not written (the other splits
            keep them, for scoring).
        occurrences: gold character spans, summed over the examples read.
        truncated_documents: documents cut at ``max_tokens`` (without ``doc_stride``).
        longest_question: the longest question, in tokens.
    """

    examples: int = 0
    windows: int = 0
    answer_found: int = 0
    answer_not_in_text: int = 0
    answer_in_no_window: int = 0
    answer_not_given: int = 0
    skipped: int = 0
    occurrences: int = 0
    truncated_documents: int = 0
    longest_question: int = 0


def input_manifest(cfg: QaPrepConfig) -> dict:
    """What the output depends on. Evidence pages are named by their directory only:
    TriviaQA's evidence is a fixed release, and stamping 70k files would bloat the manifest."""
    return {
        "format": cfg.format,
        "files": {split: file_stamp(path) for split, path in cfg.files.items()},
        "input": file_stamp(cfg.input) if cfg.input is not None else None,
        "fractions": [cfg.valid_fraction, cfg.test_fraction] if cfg.input is not None else None,
        "evidence": str(Path(cfg.evidence).resolve()) if cfg.evidence else None,
        "max_tokens": cfg.max_tokens,
        "doc_stride": cfg.doc_stride,
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
        "example_fields": list(EXAMPLE_FIELDS),
    }


def prepared_format(data: Path) -> str:
    """The input format (``triviaqa`` or ``squad``) a finished ``prep qa`` run in ``data`` read."""
    manifest = fairseq_dataset.read_manifest(data)
    if manifest is None or manifest.get("kind") != KIND:
        raise PrepError(
            f"{data}: no {fairseq_dataset.MANIFEST} of a finished `prep qa` run; "
            "prepare the data with longformer-fs prep qa"
        )
    return manifest["inputs"]["format"]


def _check_config(cfg: QaPrepConfig) -> None:
    if cfg.format not in FORMATS:
        raise PrepError(f"--format: {cfg.format!r} is not one of {', '.join(FORMATS)}")
    check_split_inputs(cfg.files, cfg.input, cfg.valid_fraction, cfg.test_fraction)
    if cfg.format == "triviaqa":
        if cfg.evidence is None:
            raise PrepError("--evidence: required with --format triviaqa (the directory holding wikipedia/ and web/)")
        if not any((Path(cfg.evidence) / name).is_dir() for name in EVIDENCE_DIRS.values()):
            raise PrepError(
                f"--evidence: {cfg.evidence} has neither a wikipedia/ nor a web/ directory; give the release's "
                "evidence/ directory"
            )
    if cfg.max_tokens < 4:
        raise PrepError(f"--max-tokens: must be at least 4, got {cfg.max_tokens}")
    if cfg.doc_stride is not None and cfg.doc_stride < 1:
        raise PrepError(f"--doc-stride: must be at least 1, got {cfg.doc_stride}")


def read_examples(cfg: QaPrepConfig, path: Path) -> QaInput:
    """One input file, read and checked, in ``cfg.format``."""
    if cfg.format == "triviaqa":
        return read_triviaqa(path, cfg.evidence)
    return read_squad(path)


def _no_example(option: str, path: Path, read: QaInput) -> PrepError:
    """The error of an input that yields no example, with what it left out."""
    left_out = Counter(d.reason for d in read.dropped_questions)
    why = ", ".join(f"{n} {reason}" for reason, n in left_out.items())
    return PrepError(f"{option}: {path} holds no example" + (f" (questions dropped: {why})" if why else ""))


def _without_answers(option: str, path: Path) -> PrepError:
    return PrepError(
        f"{option}: {path} gives no question an answer (a test file, such as wikipedia-test-without-answers.json); "
        "give it as --test (or --valid), for eval-qa to write its predicted answers"
    )


def placed_examples(
    cfg: QaPrepConfig,
) -> tuple[dict[str, tuple[Path, int]], Iterator[tuple[str, QaExample]], dict[str, list[Dropped]]]:
    """Every example with its split, in input order.

    Every input file is read and checked first. An input without answers can only be
    a valid or test split: it is an error as ``--train``, or as the ``--input`` to split.

    Returns:
        Per split, in :data:`SPLITS` order: the file its examples come from and how many
        there are; the ``(split, example)`` pairs; and the questions and documents the
        inputs hold that no example comes from (``{"questions": [...], "documents": [...]}``).
    """
    if cfg.input is None:
        read = {split: read_examples(cfg, cfg.files[split]) for split in SPLITS if split in cfg.files}
        for split, inputs in read.items():
            if not inputs.groups:
                raise _no_example(f"--{split}", cfg.files[split], inputs)
            if split == "train" and not inputs.answered:
                raise _without_answers("--train", cfg.files[split])
        splits = {split: (cfg.files[split], len(inputs.groups)) for split, inputs in read.items()}
        placed = ((split, example) for split, inputs in read.items() for example in inputs.examples)
        inputs_read = list(read.values())
    else:
        inputs = read_examples(cfg, cfg.input)
        if not inputs.groups:
            raise _no_example("--input", cfg.input, inputs)
        if not inputs.answered:
            raise _without_answers("--input", cfg.input)
        placement = [
            SPLITS[s]
            for s in assign_splits(
                [split_key(group.encode("utf-8")) for group in inputs.groups],
                cfg.valid_fraction,
                cfg.test_fraction,
                unit="questions" if cfg.format == "triviaqa" else "articles",
                remedy=FRACTIONS_REMEDY,
            )
        ]
        counts = Counter(placement)
        splits = {split: (cfg.input, counts[split]) for split in SPLITS if counts[split]}
        placed = zip(placement, inputs.examples, strict=True)
        inputs_read = [inputs]
    dropped = {
        "questions": [d for inputs in inputs_read for d in inputs.dropped_questions],
        "documents": [d for inputs in inputs_read for d in inputs.dropped_documents],
    }
    return splits, placed, dropped


class _QaSplit:
    """One split as it is written: its windows (the datasets, and ``windows.jsonl``
    naming each window's example), ``examples.jsonl`` for evaluation, and its counts."""

    def __init__(self, directory: Path, split: str, dictionary_size: int):
        self.directory, self.split = directory, split
        fields = {"tokens": dictionary_size, **{name: SplitFiles.SIGNED for name in QA_FILES[1:]}}
        self.windows = SplitFiles(directory, split, fields, listing="windows")
        self.examples = open(directory / f"{split}.examples.jsonl", "w", encoding="utf-8")
        self.stats = QaSplitStats()

    def add(self, example: QaExample, question_tokens: int, windows: list[QaWindow], truncated: bool) -> None:
        """Count the example, and write its windows unless it is a train example without an answer in them."""
        st = self.stats
        found = any(len(w.starts) for w in windows)
        st.examples += 1
        st.occurrences += len(example.spans)
        st.longest_question = max(st.longest_question, question_tokens)
        st.truncated_documents += truncated
        if found:
            st.answer_found += 1
        elif example.answers is None:
            st.answer_not_given += 1
        elif example.spans:
            st.answer_in_no_window += 1
        else:
            st.answer_not_in_text += 1
        if self.split == "train" and not found:
            st.skipped += 1
            return
        for k, window in enumerate(windows):
            row = {"id": example.id, "window": k, "question_tokens": question_tokens}
            items = {"starts": window.starts, "ends": window.ends, "offsets": window.offsets.reshape(-1)}
            self.windows.add(row, len(window.tokens), tokens=window.tokens, **items)
        st.windows += len(windows)
        answers = list(example.answers) if example.answers is not None else None
        values = (example.id, example.key, example.question, answers, example.context)
        self.examples.write(json.dumps(dict(zip(EXAMPLE_FIELDS, values, strict=True)), ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.windows.close()
        self.examples.close()


def _write_examples(
    cfg: QaPrepConfig, encoder: SubwordEncoder, directory: Path
) -> tuple[dict[str, QaSplitStats], dict[str, list[Dropped]]]:
    """Tokenize, window and write every example into its split's files; returns each
    split's counts, and what the inputs left out (:func:`placed_examples`)."""
    sources, placed, dropped = placed_examples(cfg)
    files = {split: _QaSplit(directory, split, encoder.dictionary_size) for split in sources}
    with tqdm(total=sum(n for _, n in sources.values()), desc="tokenize+window", unit=" examples") as bar:
        for batch in batched(placed, BATCH_EXAMPLES):
            encoded = encoder.encode_with_offsets([text for _, ex in batch for text in (ex.question, ex.context)])
            for (split, ex), (question_ids, _), (doc_ids, doc_offsets) in zip(
                batch, encoded[0::2], encoded[1::2], strict=True
            ):
                room = document_room(len(question_ids), cfg.max_tokens)
                if room < 1:
                    raise PrepError(
                        f"{sources[split][0]}: example {ex.id!r}: the question has {len(question_ids)} tokens; with "
                        f"<s> and two </s> it leaves no room for the document in --max-tokens {cfg.max_tokens}"
                    )
                answer_tokens = char_spans_to_tokens(doc_offsets, ex.spans)
                windows = make_windows(
                    question_ids, doc_ids, doc_offsets, answer_tokens, cfg.max_tokens, cfg.doc_stride
                )
                files[split].add(ex, len(question_ids), windows, cfg.doc_stride is None and len(doc_ids) > room)
            bar.update(len(batch))
    for split_files in files.values():
        split_files.close()
    train = files["train"].stats if "train" in files else None
    if train is not None and not train.windows:
        raise PrepError(
            f"{sources['train'][0]}: no train example has its answer inside a window ({train.answer_not_in_text} "
            f"not in the text, {train.answer_in_no_window} cut away by --max-tokens or the window edges); "
            "nothing to train on"
        )
    return {split: split_files.stats for split, split_files in files.items()}, dropped


def dropped_record(dropped: list[Dropped]) -> dict:
    """The stats' account of inputs left out: ``{"count", "by_reason", "examples"}``, the
    first :data:`REPORTED` of them named by ``origin`` and ``reason``."""
    return {
        "count": len(dropped),
        "by_reason": dict(Counter(d.reason for d in dropped)),
        "examples": [asdict(d) for d in dropped[:REPORTED]],
    }


def prepare_qa(cfg: QaPrepConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    _check_config(cfg)
    out = Path(out)
    encoder = cfg.subword.load()  # first: missing tokenizer files are reported by name
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    with Staging(out) as staging:
        stats, dropped = _write_examples(cfg, encoder, staging.dir)
        encoder.write_dictionary(staging.dir / "dict.txt")
        result = {
            "format": cfg.format,
            "max_tokens": cfg.max_tokens,
            "doc_stride": cfg.doc_stride,
            "splits": {split: asdict(st) for split, st in stats.items()},
            "questions_dropped": dropped_record(dropped["questions"]),
            "documents_dropped": dropped_record(dropped["documents"]),
        }
        staging.publish(KIND, inputs, stats=result, counted=("windows",))
    return result


def stats_table(result: dict) -> str:
    """One row per split: examples, windows, where the answers were found."""
    rows = [
        (
            "split",
            "examples",
            "windows",
            "found",
            "not in text",
            "in no window",
            "no answer given",
            "skipped",
            "occurrences/example",
            "truncated docs",
        )
    ]
    for split, st in result["splits"].items():
        rows.append(
            (
                split,
                f"{st['examples']:,}",
                f"{st['windows']:,}",
                f"{st['answer_found']:,}",
                f"{st['answer_not_in_text']:,}",
                f"{st['answer_in_no_window']:,}",
                f"{st['answer_not_given']:,}",
                f"{st['skipped']:,}",
                f"{st['occurrences'] / st['examples'] if st['examples'] else 0:.2f}",
                f"{st['truncated_documents']:,}",
            )
        )
    return aligned_table(rows)
