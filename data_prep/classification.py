"""Labelled documents as fairseq ``sentence_prediction`` data (``longformer-fs prep classification``).

The layout is what ``fairseq-preprocess`` gives that task for one input and labels::

    input0/dict.txt              the model's dictionary
    input0/{split}.{bin,idx}     per document: its token ids, then </s> (no <s>: the task's
                                 --init-token 0 prepends it)
    label/dict.txt               "CLASS COUNT" per label, in label order: the class, 0..K-1, is the
                                 label's index (COUNT: training documents); the names are
                                 prep.json's "labels"
    label/{split}.{bin,idx}      per document: [label id, </s>], the label id being the label's
                                 index in a fairseq Dictionary loaded from label/dict.txt (4 + its line)
    stats.json, prep.json

so ``--task sentence_prediction --num-classes K`` reads it as it is, with targets 0..K-1 in
label order. The dictionary holds the classes, not the names, because fairseq's
``--report-acc-and-f1`` (and ``--report-mcc``) read its symbols back as integers.
Documents are not truncated: the task's ``--shorten-method truncate`` and
``--max-positions`` cut them to the model.

Inputs, each a file or a folder:

- ``.jsonl``/``.json``: one JSON object per line, the text and label under ``text_field``
  and ``label_field`` (Hyperpartisan converted from its XML: ``label_field="hyperpartisan"``).
- ``.tsv``: a header row names the columns the same way (the unnamed first column that
  pandas' ``to_csv`` writes, its index, is one more column), or ``text_column`` and
  ``label_column`` (1-based, as ``cut -f``) pick them in a file without one. Records follow
  the rules of Python's ``csv`` module, as it and pandas write TSV: a field holding a tab,
  a line break or a quote is quoted, its quotes doubled, so a record may span lines and
  errors name the line it starts on. ``tsv_quoting="none"`` reads plain TSV instead (one
  record a line, quotes are text: GLUE's files).
- A folder of label folders, as the IMDB release's ``aclImdb/train`` and ``aclImdb/test``:
  each subfolder's name is the label of the ``.txt`` files in it, one document a file,
  read in the order of their names (the rating in IMDB's ``<id>_<rating>.txt`` is not
  used). The text loses its surrounding white space, and each ``<br />`` becomes a
  newline: the tag is the line break the reviewer typed (two make a paragraph break), and
  as a newline it is one token, which RoBERTa's pretraining text holds between
  paragraphs; a space would run paragraphs together, the tag itself costs several tokens
  of markup. Skipped, and counted by reason: ``unsup`` (the release's unlabelled
  reviews), hidden folders, files beside the label folders (IMDB's ``urls_*.txt`` and
  ``*.feat``) and what in a label folder is not a ``.txt`` file.

Labels are strings without white space, or integers. Booleans, JSON's ``true``/``false``
and the words in any case (``True`` as pandas writes it, ``TRUE``), are the labels
``false`` and ``true``. The labels are ``labels`` in that order (booleans written
``true``/``false`` there too), or else the training labels, sorted: numerically when they
are all integers, always ``false, true`` for booleans. So ``true`` is class 1, the
positive class of the F1 that fairseq's ``--report-acc-and-f1`` reports, as ``pos`` is
for IMDB's ``neg, pos``. A label outside them is an error naming its file and line.

The splits are given inputs (each must hold a document), or one input cut by
``valid_fraction`` and ``test_fraction`` with the rule every preparation uses
(:func:`~.splits.assign_splits`): documents ranked by a hash of their text salted with the
seed, a split with a fraction above 0 getting at least one, and identical texts sharing a
split. ``split_weights``, relative weights (``80,10,10``), is the older spelling of the
fractions.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import EOS, NUM_SPECIALS, SPECIAL_SYMBOLS, PrepKind
from longformer_fs.tokenization import SubwordSpec

from .fairseq_dataset import SPLITS, MmapWriter, PrepError, Staging, aligned_table, file_stamp, previous_stats
from .inputs import wrong_kind
from .splits import FRACTIONS_REMEDY, assign_splits, check_split_inputs, split_key

KIND = PrepKind.CLASSIFICATION
BATCH_DOCS = 64  # documents per tokenizer call
# Symbols a label may not be: fairseq's specials, and <mask>, which sentence_prediction adds.
RESERVED = frozenset(SPECIAL_SYMBOLS) | {"<mask>"}
MAX_LABELS_SHOWN = 20  # in the error for an unknown label
BOOLEANS = ("false", "true")  # the labels of boolean values, in class order: true is class 1
TSV_QUOTING = ("csv", "none")
UNLABELLED = "unsup"  # the IMDB release's folder of unlabelled reviews
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)  # IMDB writes <br />
REPORTED = 50  # examples of skipped inputs kept in stats.json
# csv's default limit, 131,072 characters a field, is less than one long document (a book chapter).
FIELD_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class ClassificationConfig:
    """What ``prep classification`` reads.

    Attributes:
        files: split -> input file or folder, or empty when ``input`` is split.
        input: one file or folder to cut into train, valid and test.
        split_weights: relative weights of train, valid and test, the older spelling of
            ``valid_fraction``/``test_fraction``; when given, it is the one used.
        seed: the salt of the hash that splits ``input``.
        text_field, label_field: JSONL keys / TSV header names.
        text_column, label_column: 1-based TSV columns of files without a header.
        labels: the label order; None: the sorted training labels.
        report_length: stats count documents longer than this many tokens.
        valid_fraction, test_fraction: shares of ``input``'s distinct texts for valid and test.
        tsv_quoting: ``csv``, TSV as Python's csv module and pandas write it (quoted fields
            may hold tabs, line breaks and doubled quotes), or ``none``: one record a line,
            quotes are text.
    """

    subword: SubwordSpec
    files: dict
    input: Path | None = None
    split_weights: tuple[float, float, float] | None = None
    seed: int = 1
    text_field: str = "text"
    label_field: str = "label"
    text_column: int | None = None
    label_column: int | None = None
    labels: tuple[str, ...] | None = None
    report_length: int = 4096
    valid_fraction: float = 0.1
    test_fraction: float = 0.1
    tsv_quoting: str = "csv"

    @property
    def fractions(self) -> tuple[float, float]:
        """``(valid, test)``: the shares of ``input`` that valid and test get."""
        if self.split_weights is None:
            return self.valid_fraction, self.test_fraction
        total = sum(self.split_weights)
        return self.split_weights[1] / total, self.split_weights[2] / total


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str  # the dictionary symbol
    origin: str  # "file:line" or the document's file, for error messages


@dataclass(frozen=True)
class Skipped:
    """Input that holds no labelled document: ``count`` documents or entries at ``origin``."""

    origin: str
    reason: str  # its kind first, details after " (": the kind is what stats count by
    count: int = 1


def label_symbol(value, origin: str) -> str:
    """A label value from the input (or ``--labels``) as its dictionary symbol.

    Booleans, and the strings true/false in any case, are ``false``/``true``; an integer is
    its digits; a string stays as it is. A value that cannot be a symbol is a PrepError
    naming ``origin``.
    """
    if isinstance(value, bool):
        return BOOLEANS[value]
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise PrepError(f"{origin}: label {value!r} is {type(value).__name__}; expected a string, integer or boolean")
    if value.lower() in BOOLEANS:
        return value.lower()
    if not value or any(c.isspace() for c in value):
        raise PrepError(f"{origin}: label {value!r} is empty or holds white space; a label is one symbol")
    if value in RESERVED:
        raise PrepError(f"{origin}: label {value!r} is one of fairseq's reserved symbols")
    return value


def _lines(path: Path, expected: str, ends: bool = False) -> Iterator[tuple[int, str]]:
    """``(number, line)`` of a UTF-8 text file, without its line break unless ``ends``; a
    byte-order mark (as Excel writes) is not part of the first line."""
    if not path.is_file():
        raise PrepError(f"{path}: not found")
    problem = wrong_kind(path, expected)
    if problem:
        raise PrepError(f"{path}: {problem}")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise PrepError(f"{path}:{number}: not UTF-8 text (byte {err.start} of the line)") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line if ends else line.rstrip("\r\n")


def _read_jsonl(path: Path, cfg: ClassificationConfig) -> list[LabelledText]:
    records = []
    for number, line in _lines(path, "JSONL"):
        if not line.strip():
            continue
        origin = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise PrepError(f"{origin}: not valid JSON ({err.msg})") from None
        if not isinstance(obj, dict):
            raise PrepError(f"{origin}: expected a JSON object, got {type(obj).__name__}")
        for key in (cfg.text_field, cfg.label_field):
            if key not in obj:
                raise PrepError(f"{origin}: no {key!r} field (choose with --text-field/--label-field)")
        if not isinstance(obj[cfg.text_field], str):
            raise PrepError(f"{origin}: {cfg.text_field!r} is {type(obj[cfg.text_field]).__name__}, expected a string")
        records.append(LabelledText(obj[cfg.text_field], label_symbol(obj[cfg.label_field], origin), origin))
    return records


def _csv_problem(err: csv.Error) -> str:
    """What a csv.Error of a strict reader means, in the words of a TSV file."""
    message = str(err)
    if "expected after" in message:
        return 'a field opens with a quote (") and goes on after its closing quote'
    if "unexpected end of data" in message:
        return 'a quote (") opened in this record never closes'
    if "new-line character" in message:
        return "a carriage return (\\r) inside a field that is not quoted"
    return message


def _tsv_records(path: Path, quoting: str) -> Iterator[tuple[int, list[str]]]:
    """``(line the record starts on, its fields)`` of every record of a TSV file that is
    not blank: by the csv module's rules (``quoting="csv"``), or a line split at its tabs."""
    if quoting == "none":
        for number, line in _lines(path, "TSV"):
            if line.strip():
                yield number, line.split("\t")
        return
    # QUOTE_MINIMAL, what csv.writer and pandas' to_csv write: only a field that starts with
    # a quote is quoted, so a quote inside a plain field ('He said "hi"') stays text and plain
    # TSV reads as before; QUOTE_NONE would keep the quotes and cut quoted line breaks into
    # records. strict: a plain field that merely starts with a quote ('"Hi" he said') is an
    # error naming its line, where the default would drop its quotes without a word.
    csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))
    # The lines keep their breaks: a break inside a quoted field is part of the text.
    reader = csv.reader((line for _, line in _lines(path, "TSV", ends=True)), delimiter="\t", strict=True)
    start = 1
    while True:
        try:
            fields = next(reader, None)
        except csv.Error as err:
            raise PrepError(
                f"{path}:{start}: {_csv_problem(err)}; .tsv files are read as Python's csv module and pandas "
                "write them (a field holding a tab, a line break or a quote is quoted, its quotes doubled): "
                "for a TSV whose quotes are plain text, pass --tsv-quoting none"
            ) from None
        if fields is None:
            return
        if any(field.strip() for field in fields):
            yield start, fields
        start = reader.line_num + 1


def _read_tsv(path: Path, cfg: ClassificationConfig) -> list[LabelledText]:
    records = _tsv_records(path, cfg.tsv_quoting)
    if cfg.text_column is not None:
        text_index, label_index = cfg.text_column - 1, cfg.label_column - 1
    else:
        header = next(records, None)
        if header is None:
            raise PrepError(f"{path}: empty; a TSV file starts with a header row naming its columns")
        number, columns = header
        for name in (cfg.text_field, cfg.label_field):
            if name not in columns:
                raise PrepError(
                    f"{path}:{number}: the header has no column {name!r} (columns: {', '.join(columns)}); name them "
                    "with --text-field/--label-field, or give --text-column/--label-column for a file without a header"
                )
        text_index, label_index = columns.index(cfg.text_field), columns.index(cfg.label_field)
    labelled = []
    need = max(text_index, label_index) + 1
    for number, fields in records:
        origin = f"{path}:{number}"
        if len(fields) < need:
            raise PrepError(f"{origin}: {len(fields)} tab-separated columns, need at least {need}")
        labelled.append(LabelledText(fields[text_index], label_symbol(fields[label_index], origin), origin))
    return labelled


def _read_document(path: Path) -> str:
    """One document of a label folder: its text, stripped, with ``<br />`` tags as newlines."""
    problem = wrong_kind(path, "text")
    if problem:
        raise PrepError(f"{path}: {problem}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise PrepError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return LINE_BREAK.sub("\n", text).strip()


def _read_folder(path: Path) -> tuple[list[LabelledText], list[Skipped]]:
    """The documents of a folder of label folders (the module docstring), and what it skipped."""
    records, skipped = [], []
    for entry in sorted(path.iterdir()):
        if not entry.is_dir():
            skipped.append(Skipped(str(entry), "not in a label folder"))
        elif entry.name == UNLABELLED:
            files = sum(1 for _ in entry.iterdir())
            skipped.append(Skipped(str(entry), f"unlabelled ({files:,} files, the IMDB release's unsup/)", files))
        elif entry.name.startswith("."):
            skipped.append(Skipped(str(entry), "hidden folder"))
        else:
            label = label_symbol(entry.name, str(entry))
            for file in sorted(entry.iterdir()):
                if file.is_file() and file.suffix.lower() == ".txt":
                    records.append(LabelledText(_read_document(file), label, str(file)))
                else:
                    skipped.append(Skipped(str(file), "not a .txt file"))
    return records, skipped


def read_labelled(path: Path, cfg: ClassificationConfig) -> tuple[list[LabelledText], list[Skipped]]:
    """Every (text, label) of a ``.jsonl``/``.json`` or ``.tsv`` file or a folder of label
    folders, in the input's order, and what it skipped (folders only: a file's lines are
    documents or errors)."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path, cfg), []
    if suffix == ".tsv":
        return _read_tsv(path, cfg), []
    raise PrepError(
        f"{path}: unknown format; name the file .jsonl (one JSON object per line) or .tsv, or give a folder "
        "of label folders"
    )


def split_records(
    records: list[LabelledText], valid_fraction: float, test_fraction: float, seed: int, remedy: str = FRACTIONS_REMEDY
) -> dict[str, list]:
    """``records`` cut into train/valid/test by :func:`~.splits.assign_splits` (keys: each
    text hashed with the seed). Splits with fraction 0 are left out; ``remedy`` is what the
    error for too few documents tells the user to do."""
    salt = f"classification seed {seed}".encode()
    splits = assign_splits(
        [split_key(r.text.encode("utf-8"), salt) for r in records],
        valid_fraction,
        test_fraction,
        unit="distinct documents",
        remedy=remedy,
    )
    return {
        split: [r for r, s in zip(records, splits, strict=True) if SPLITS[s] == split]
        for split, fraction in zip(SPLITS, (1.0, valid_fraction, test_fraction), strict=True)
        if fraction > 0
    }


def _label_order(symbols: set[str]) -> list[str]:
    """The default label order: ``false, true`` for booleans (both, even if training holds
    one: true stays class 1), numerically sorted integers, else sorted text."""
    if symbols and symbols <= set(BOOLEANS):
        return list(BOOLEANS)
    if all(s.lstrip("-").isdigit() for s in symbols):
        return sorted(symbols, key=int)
    return sorted(symbols)


def input_manifest(cfg: ClassificationConfig) -> dict:
    """What the output depends on: the inputs' sizes and mtimes, and every option."""
    return {
        "files": {split: file_stamp(path) for split, path in cfg.files.items()},
        "input": file_stamp(cfg.input) if cfg.input else None,
        "fractions": list(cfg.fractions) if cfg.input else None,
        "seed": cfg.seed if cfg.input else None,
        "fields": [cfg.text_field, cfg.label_field],
        "columns": [cfg.text_column, cfg.label_column],
        "tsv_quoting": cfg.tsv_quoting,
        "labels": list(cfg.labels) if cfg.labels is not None else None,
        "report_length": cfg.report_length,
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
        # label/dict.txt holds the classes (earlier preparations wrote the names: they are redone)
        "label_symbols": "classes",
    }


def _check_config(cfg: ClassificationConfig) -> None:
    weights = cfg.split_weights
    # check_split_inputs checks the fractions; the older weights are checked below, in their words.
    fractions = cfg.fractions if weights is None else (None, None)
    check_split_inputs(cfg.files, cfg.input, *fractions, need_train=True, folders=True)
    if cfg.input is not None and weights is not None:
        if len(weights) != 3 or min(weights) < 0 or weights[0] <= 0:
            raise PrepError(f"--split: need TRAIN,VALID,TEST weights >= 0 with TRAIN > 0, got {weights}")
    if (cfg.text_column is None) != (cfg.label_column is None):
        raise PrepError("--text-column and --label-column go together (TSV files without a header)")
    if cfg.text_column is not None and min(cfg.text_column, cfg.label_column) < 1:
        raise PrepError("--text-column/--label-column: columns are numbered from 1")
    if cfg.tsv_quoting not in TSV_QUOTING:
        raise PrepError(f"--tsv-quoting: {cfg.tsv_quoting!r} is not one of {', '.join(TSV_QUOTING)}")
    if cfg.labels is not None:
        if len({label_symbol(label, "--labels") for label in cfg.labels}) != len(cfg.labels):
            raise PrepError(f"--labels: a label is listed twice ({','.join(cfg.labels)})")


def _length_stats(lengths: list[int], report_length: int) -> dict:
    if not lengths:
        return {"mean": 0.0, "p90": 0.0, "max": 0, "over_report_length": 0}
    values = np.asarray(lengths)
    return {
        "mean": float(values.mean()),
        "p90": float(np.percentile(values, 90)),
        "max": int(values.max()),
        "over_report_length": int((values > report_length).sum()),
    }


def _count_by_reason(skipped: list[Skipped]) -> dict[str, int]:
    """Skipped documents and entries by the kind of reason ("unlabelled (12,500 files ...)" -> "unlabelled")."""
    counts = Counter()
    for skip in skipped:
        counts[skip.reason.split(" (", 1)[0]] += skip.count
    return dict(counts)


def prepare_classification(cfg: ClassificationConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``): the
    labels in class order; per split the documents, their labels and token lengths; and
    ``skipped``, what the inputs held that is no labelled document: ``{"count",
    "by_reason", "examples"}`` (examples: ``{"origin", "reason"}``).

    Lengths in the stats count the model's input: ``<s>``, the text's tokens and ``</s>``.
    """
    _check_config(cfg)
    out = Path(out)
    encoder = cfg.subword.load()  # first: missing tokenizer files are reported by name
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    given = {"input": cfg.input} if cfg.input is not None else {s: cfg.files[s] for s in SPLITS if s in cfg.files}
    read, skipped = {}, []
    for name, path in given.items():
        read[name], skips = read_labelled(path, cfg)
        skipped += skips
        if not read[name]:
            hint = " (a folder holds one subfolder of .txt files per label)" if Path(path).is_dir() else ""
            raise PrepError(f"--{name}: {path} holds no document{hint}")
    if cfg.input is not None:
        remedy = FRACTIONS_REMEDY
        if cfg.split_weights is not None:
            remedy = "give a split weight 0 in --split to leave it out (e.g. --split 80,20,0), or add documents"
        splits = split_records(read["input"], *cfg.fractions, cfg.seed, remedy)
    else:
        splits = read
    if cfg.labels is not None:
        labels = [label_symbol(label, "--labels") for label in cfg.labels]  # True -> true, as in the data
    else:
        labels = _label_order({r.label for r in splits["train"]})
    label_ids = {label: NUM_SPECIALS + i for i, label in enumerate(labels)}
    for records in splits.values():
        for record in records:
            if record.label not in label_ids:
                # A real label set can run to hundreds: name the first ones and the count.
                known = ", ".join(labels[:MAX_LABELS_SHOWN])
                if len(labels) > MAX_LABELS_SHOWN:
                    known += f", ... ({len(labels)} in all)"
                source = "given with --labels" if cfg.labels is not None else "the training split's"
                raise PrepError(
                    f"{record.origin}: label {record.label!r} is not in the label dictionary (known: {known}); "
                    f"the labels are {source}: list every label with --labels to keep this one"
                )

    stats = {}
    with (
        Staging(out) as staging,
        tqdm(total=sum(len(r) for r in splits.values()), desc="tokenize+write", unit=" docs") as bar,
    ):
        for split, records in splits.items():
            texts = MmapWriter(staging.dir / "input0" / split, encoder.dictionary_size)
            targets = MmapWriter(staging.dir / "label" / split, NUM_SPECIALS + len(labels))
            lengths = []
            for start in range(0, len(records), BATCH_DOCS):
                batch = records[start : start + BATCH_DOCS]
                for record, ids in zip(batch, encoder.encode([r.text for r in batch]), strict=True):
                    texts.add(np.append(ids, EOS))
                    targets.add(np.array([label_ids[record.label], EOS]))
                    lengths.append(len(ids) + 2)  # with <s> and </s>
                bar.update(len(batch))
            texts.finalize()
            targets.finalize()
            stats[split] = {
                "documents": len(records),
                "labels": {label: n for label, n in Counter(r.label for r in records).most_common()},
                "tokens": _length_stats(lengths, cfg.report_length),
            }
        encoder.write_dictionary(staging.dir / "input0" / "dict.txt")
        train_counts = Counter(r.label for r in splits["train"])
        (staging.dir / "label" / "dict.txt").write_text(
            "".join(f"{index} {train_counts[label]}\n" for index, label in enumerate(labels)), encoding="utf-8"
        )
        result = {
            "labels": labels,
            "report_length": cfg.report_length,
            "splits": stats,
            "skipped": {
                "count": sum(skip.count for skip in skipped),
                "by_reason": _count_by_reason(skipped),
                "examples": [{"origin": skip.origin, "reason": skip.reason} for skip in skipped[:REPORTED]],
            },
        }
        staging.publish(KIND, inputs, stats=result, counted=("documents",), labels=labels)
    return result


def stats_table(result: dict) -> str:
    """One row per split: documents, label counts and token lengths."""
    over = f"> {result['report_length']}"
    rows = [("split", "documents", "labels", "mean tokens", "p90", "max", over)]
    for split, st in result["splits"].items():
        tokens = st["tokens"]
        rows.append(
            (
                split,
                f"{st['documents']:,}",
                " ".join(f"{label}:{st['labels'].get(label, 0)}" for label in result["labels"]),
                f"{tokens['mean']:,.0f}",
                f"{tokens['p90']:,.0f}",
                f"{tokens['max']:,}",
                f"{tokens['over_report_length']:,}",
            )
        )
    return aligned_table(rows, left=(0, 2))
