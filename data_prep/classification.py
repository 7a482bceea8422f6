"""Labelled documents as fairseq ``sentence_prediction`` data (``longformer-fs prep classification``).

The layout is what ``fairseq-preprocess`` gives that task for one input and labels::

    input0/dict.txt              the model's dictionary
    input0/{split}.{bin,idx}     per document: its token ids, then </s> (no <s>: the task's
                                 --init-token 0 prepends it)
    label/dict.txt               "LABEL COUNT" per label, in label order (COUNT: training documents)
    label/{split}.{bin,idx}      per document: [label id, </s>], the label id being the label's
                                 index in a fairseq Dictionary loaded from label/dict.txt (4 + its line)
    stats.json, prep.json

so ``--task sentence_prediction --num-classes K`` reads it as it is, with targets 0..K-1 in
label order. Documents are not truncated: the task's ``--shorten-method truncate`` and
``--max-positions`` cut them to the model.

Inputs (by file name): ``.jsonl``/``.json``, one JSON object per line with the text and
label in ``text_field``/``label_field``; or ``.tsv``, whose header row names the columns
the same way, or with ``text_column``/``label_column`` (1-based, as ``cut -f``) a file
without a header. Labels may be strings (no white space), integers or booleans (written
``0``/``1``, as fairseq's ``--report-acc-and-f1`` reads labels as integers, 1 the positive
one). The splits are given files (each must hold a document), or one input cut by
weights (``80,10,10`` -> 80%/10%/10%; they need not sum to 100) with the rule every
preparation uses (:func:`~.splits.assign_splits`): documents ranked by a hash of their
text salted with the seed, a split with a weight above 0 getting at least one, and
identical texts sharing a split.

The labels are ``labels`` in that order, or else the training labels, sorted (numerically
when they are all integers). A label outside them is an error naming its file and line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import EOS, NUM_SPECIALS, SPECIAL_SYMBOLS

from .fairseq_dataset import SPLITS, MmapWriter, PrepError, Staging, aligned_table, file_stamp, previous_stats
from .inputs import wrong_kind
from .splits import assign_splits, check_split_inputs, split_key
from .subword import SubwordSpec

KIND = "classification"
BATCH_DOCS = 64  # documents per tokenizer call
# Symbols a label may not be: fairseq's specials, and <mask>, which sentence_prediction adds.
RESERVED = frozenset(SPECIAL_SYMBOLS) | {"<mask>"}
MAX_LABELS_SHOWN = 20  # in the error for an unknown label


@dataclass(frozen=True)
class ClassificationConfig:
    """What ``prep classification`` reads.

    Attributes:
        files: split -> input file, or empty when ``input`` is split.
        input: one file to shuffle and split by ``split_weights`` (train, valid, test).
        seed: the shuffle's seed.
        text_field, label_field: JSONL keys / TSV header names.
        text_column, label_column: 1-based TSV columns of files without a header.
        labels: the label order; None: the sorted training labels.
        report_length: stats count documents longer than this many tokens.
    """

    subword: SubwordSpec
    files: dict
    input: Path | None = None
    split_weights: tuple[float, float, float] = (80.0, 10.0, 10.0)
    seed: int = 1
    text_field: str = "text"
    label_field: str = "label"
    text_column: int | None = None
    label_column: int | None = None
    labels: tuple[str, ...] | None = None
    report_length: int = 4096


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str  # the dictionary symbol
    origin: str  # "file:line", for error messages


def label_symbol(value, origin: str) -> str:
    """A label value from the input as a dictionary symbol."""
    if isinstance(value, bool):  # 0/1: fairseq's --report-acc-and-f1 reads labels as integers, 1 positive
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise PrepError(f"{origin}: label {value!r} is {type(value).__name__}; expected a string, integer or boolean")
    if not value or any(c.isspace() for c in value):
        raise PrepError(f"{origin}: label {value!r} is empty or holds white space; a label is one symbol")
    if value in RESERVED:
        raise PrepError(f"{origin}: label {value!r} is one of fairseq's reserved symbols")
    return value


def _lines(path: Path, expected: str) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise PrepError(f"{path}: not found")
    problem = wrong_kind(path, expected)
    if problem:
        raise PrepError(f"{path}: {problem}")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise PrepError(f"{path}:{number}: not UTF-8 text (byte {err.start} of the line)") from None


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


def _read_tsv(path: Path, cfg: ClassificationConfig) -> list[LabelledText]:
    lines = _lines(path, "TSV")
    if cfg.text_column is not None:
        text_index, label_index = cfg.text_column - 1, cfg.label_column - 1
    else:
        header = next(lines, None)
        if header is None:
            raise PrepError(f"{path}: empty; a TSV file starts with a header row naming its columns")
        columns = header[1].split("\t")
        for name in (cfg.text_field, cfg.label_field):
            if name not in columns:
                raise PrepError(
                    f"{path}:1: the header has no column {name!r} (columns: {', '.join(columns)}); name them with "
                    "--text-field/--label-field, or give --text-column/--label-column for a file without a header"
                )
        text_index, label_index = columns.index(cfg.text_field), columns.index(cfg.label_field)
    records = []
    need = max(text_index, label_index) + 1
    for number, line in lines:
        if not line.strip():
            continue
        origin = f"{path}:{number}"
        cells = line.split("\t")
        if len(cells) < need:
            raise PrepError(f"{origin}: {len(cells)} tab-separated columns, need at least {need}")
        records.append(LabelledText(cells[text_index], label_symbol(cells[label_index], origin), origin))
    return records


def read_labelled(path: Path, cfg: ClassificationConfig) -> list[LabelledText]:
    """Every (text, label) of a ``.jsonl``/``.json`` or ``.tsv`` file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path, cfg)
    if suffix == ".tsv":
        return _read_tsv(path, cfg)
    raise PrepError(f"{path}: unknown format; name the file .jsonl (one JSON object per line) or .tsv")


def split_records(records: list[LabelledText], weights: tuple[float, float, float], seed: int) -> dict[str, list]:
    """``records`` cut into train/valid/test by relative ``weights`` (:func:`~.splits.assign_splits`,
    keys: each text hashed with the seed). Splits with weight 0 are left out."""
    total = sum(weights)
    salt = f"classification seed {seed}".encode()
    splits = assign_splits(
        [split_key(r.text.encode("utf-8"), salt) for r in records],
        weights[1] / total,
        weights[2] / total,
        unit="distinct documents",
        remedy="give a split weight 0 in --split to leave it out (e.g. --split 80,20,0), or add documents",
    )
    return {
        split: [r for r, s in zip(records, splits, strict=True) if SPLITS[s] == split]
        for split, weight in zip(SPLITS, weights, strict=True)
        if weight > 0
    }


def _label_order(symbols: set[str]) -> list[str]:
    """Sorted labels: numerically when every one is an integer, else as text."""
    if all(s.lstrip("-").isdigit() for s in symbols):
        return sorted(symbols, key=int)
    return sorted(symbols)


def input_manifest(cfg: ClassificationConfig) -> dict:
    """What the output depends on: the input files' sizes and mtimes, and every option."""
    return {
        "files": {split: file_stamp(path) for split, path in cfg.files.items()},
        "input": file_stamp(cfg.input) if cfg.input else None,
        "split_weights": list(cfg.split_weights) if cfg.input else None,
        "seed": cfg.seed if cfg.input else None,
        "fields": [cfg.text_field, cfg.label_field],
        "columns": [cfg.text_column, cfg.label_column],
        "labels": list(cfg.labels) if cfg.labels is not None else None,
        "report_length": cfg.report_length,
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
    }


def _check_config(cfg: ClassificationConfig) -> None:
    check_split_inputs(cfg.files, cfg.input, need_train=True)
    if cfg.input is not None:
        if len(cfg.split_weights) != 3 or min(cfg.split_weights) < 0 or cfg.split_weights[0] <= 0:
            raise PrepError(f"--split: need TRAIN,VALID,TEST weights >= 0 with TRAIN > 0, got {cfg.split_weights}")
    if (cfg.text_column is None) != (cfg.label_column is None):
        raise PrepError("--text-column and --label-column go together (TSV files without a header)")
    if cfg.text_column is not None and min(cfg.text_column, cfg.label_column) < 1:
        raise PrepError("--text-column/--label-column: columns are numbered from 1")
    if cfg.labels is not None:
        if len(set(cfg.labels)) != len(cfg.labels):
            raise PrepError(f"--labels: a label is listed twice ({','.join(cfg.labels)})")
        for label in cfg.labels:
            label_symbol(label, "--labels")


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


def prepare_classification(cfg: ClassificationConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``).

    Lengths in the stats count the model's input: ``<s>``, the text's tokens and ``</s>``.
    """
    _check_config(cfg)
    out = Path(out)
    encoder = cfg.subword.load()  # first: missing tokenizer files are reported by name
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, {"input0", "label", "stats.json"}, force, log)) is not None:
        return previous

    given = {"input": cfg.input} if cfg.input is not None else {s: cfg.files[s] for s in SPLITS if s in cfg.files}
    read = {name: read_labelled(path, cfg) for name, path in given.items()}
    for name, records in read.items():
        if not records:
            raise PrepError(f"--{name}: {given[name]} holds no document")
    splits = split_records(read["input"], cfg.split_weights, cfg.seed) if cfg.input is not None else read
    labels = list(cfg.labels) if cfg.labels is not None else _label_order({r.label for r in splits["train"]})
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
            "".join(f"{label} {train_counts[label]}\n" for label in labels), encoding="utf-8"
        )
        result = {"labels": labels, "report_length": cfg.report_length, "splits": stats}
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
