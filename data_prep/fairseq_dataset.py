"""What every preparation writes: a fairseq binarized dataset directory.

Every ``longformer-fs prep`` command produces the same kind of directory: fairseq mmap
datasets for the splits in :data:`SPLITS`, a ``dict.txt``, and a manifest
(:data:`MANIFEST`) that records the format, the kind of preparation, the inputs it was
made from and what came out. This module holds what they share:

- :class:`PrepError`, the one exception for a problem with the user's input;
- :func:`up_to_date`, every preparation's first step: :mod:`longformer_fs.output`'s guard,
  which keeps a command from mixing its files with someone else's, then
  :func:`finished_manifest`, which makes a rerun with the same inputs a no-op;
- :class:`Staging`: files are staged beside ``OUT`` and moved in together, the manifest
  last, so an interrupted run never looks finished; a run that fails removes what it
  staged (:mod:`longformer_fs.output`, as every writer does);
- :class:`MmapWriter`, one fairseq mmap dataset written item by item, and
  :class:`SplitFiles`, one split of aligned datasets with a JSONL listing beside them;
- :func:`file_stamp` (what a manifest records of an input file), :func:`batched`, and
  :func:`aligned_table`, the layout of the stats table each command prints.

fairseq itself is never imported: :class:`MmapWriter` writes its layout from the
constants below (tests hold them, and the files, equal to fairseq's), since importing
fairseq costs every ``prep`` command, and each spawn worker of ``prep docs``, seconds.
"""

from __future__ import annotations

import itertools
import json
import struct
from array import array
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from longformer_fs import output
from longformer_fs.conventions import MANIFEST

SPLITS = ("train", "valid", "test")
# 2: one manifest layout for every preparation: {"format", "kind", "inputs", **outputs}.
# 3: stamps as longformer_fs.output.stamp writes them, and the files written.
FORMAT_VERSION = 3
COMMAND = Path(MANIFEST).stem  # "prep": the manifest is this command's record
STATS = "stats.json"  # what a preparation returned, kept for its reruns


class PrepError(ValueError):
    """A problem with the user's inputs or output directory; the message says what to do."""


def up_to_date(out: Path, kind: str, inputs: dict, force: bool, log=print) -> dict | None:
    """Every preparation's first step: :func:`longformer_fs.output.check` ``out`` (absent,
    empty, or this kind's dataset from the same input files, unless ``force``), then find
    a finished run to keep.

    Args:
        out: the output directory; not created here (:class:`Staging` creates it, so a run
            that fails on its inputs leaves nothing behind).
        kind: the preparation (``text8``, ``docs``, ...).
        inputs: what the output depends on (JSON-like), every input file as
            :func:`file_stamp`.
        force: write over another directory (its other files are left alone), and redo a
            finished run.
        log: where to say that there is nothing to do.

    Returns:
        The manifest of a finished ``kind`` run made from exactly ``inputs`` (said through
        ``log``), or None: the preparation has work to do.

    Raises:
        PrepError: ``out`` holds something else (one line, naming it and ``--force``).
    """
    try:
        output.check(out, COMMAND, inputs, force, kind)
    except output.OutputRefused as err:
        raise PrepError(str(err)) from None
    manifest = None if force else finished_manifest(out, kind, inputs)
    if manifest is not None:
        log(f"{out}: up to date (same inputs as the finished run recorded in its manifest); nothing to do")
    return manifest


def read_manifest(out: Path) -> dict | None:
    """The manifest of a finished run in ``out``, or None."""
    return output.read_record(out, COMMAND)


def finished_manifest(out: Path, kind: str, inputs: dict) -> dict | None:
    """The manifest in ``out`` when a finished ``kind`` run of this format made it from
    exactly ``inputs`` (JSON-like: what ``json.loads(json.dumps(inputs))`` gives back)."""
    manifest = output.finished(out, COMMAND, inputs, kind)
    return manifest if manifest is not None and manifest.get("format") == FORMAT_VERSION else None


def previous_stats(out: Path, kind: str, inputs: dict, force: bool, log=print) -> dict | None:
    """:func:`up_to_date` for the preparations that keep a ``stats.json``: what the
    finished run returned (its stats), or None when there is work to do."""
    if up_to_date(out, kind, inputs, force, log) is None:
        return None
    return json.loads((Path(out) / STATS).read_text())


# What a manifest records of an input file or folder.
file_stamp = output.stamp


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Lists of ``size`` consecutive items (the last one shorter), lazily."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def aligned_table(rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> str:
    """``rows`` (the header first) as text columns two spaces apart: the columns in
    ``left`` (names, labels) flush left, the rest (numbers) flush right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    )


class Staging:
    """A preparation's outputs, written into :attr:`dir` and published together through
    :mod:`longformer_fs.output` (staged beside ``out``, the manifest moved in last).

    Use it as a context manager. Leaving on an exception (bad input, Ctrl-C) removes what
    it staged, and ``out``'s parents that it made; ``out`` is untouched.
    """

    def __init__(self, out: Path):
        self.out = Path(out)
        self._writing = output.staged(self.out, COMMAND)
        self._staged: output.Staged | None = None

    @property
    def dir(self) -> Path:
        return self._staged.dir

    def __enter__(self) -> "Staging":
        self._staged = self._writing.__enter__()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._writing.__exit__(kind, error, traceback)

    def publish(
        self, kind: str, inputs: dict, stats: dict | None = None, counted: Iterable[str] = (), **outputs
    ) -> dict:
        """Move the staged files in and write the manifest; returns it.

        The files an earlier run of this directory wrote that this one did not (a split it
        had) are removed, or they would pass for this run's. ``stats``, what the
        preparation returns, is kept as ``stats.json`` for :func:`previous_stats`.
        ``counted`` names counts of each split in ``stats["splits"]`` that the manifest
        repeats as ``splits`` (the recipes size a run's updates from them).
        """
        if counted:
            outputs["splits"] = {s: {k: st[k] for k in counted} for s, st in stats["splits"].items()}
        if stats is not None:
            (self.dir / STATS).write_text(json.dumps(stats, indent=2))
        return self._staged.publish({"format": FORMAT_VERSION, "kind": kind, "inputs": inputs, **outputs})


# fairseq's mmap index (``MMapIndexedDataset.Index``): its magic, its version, and the
# codes of the dtypes a writer here stores (fairseq's ``_code_to_dtype``).
MMAP_MAGIC = b"MMIDIDX\x00\x00"
MMAP_VERSION = 1
MMAP_DTYPE_CODES = {np.uint16: 8, np.uint32: 9, np.int64: 5, np.int32: 4}


def token_dtype(vocab_size: int | None):
    """The smallest unsigned type fairseq stores ids below ``vocab_size`` in
    (``indexed_dataset.best_fitting_int_dtype``)."""
    if vocab_size is None:
        return np.uint32
    return np.uint16 if vocab_size < 65500 else np.uint32 if vocab_size < 4294967295 else np.int64


class MmapWriter:
    """One fairseq mmap dataset (``prefix.bin`` + ``prefix.idx``), written item by item.

    The layout is that of fairseq's ``MMapIndexedDatasetBuilder``, but the index waits in
    4 bytes an item (fairseq's keeps a Python int, about 36 bytes, and a second list of
    them when it writes): a corpus of tens of millions of paragraphs would otherwise hold
    gigabytes until the end.

    Args:
        prefix: the path without ``.bin``/``.idx``.
        vocab_size: for token ids: fairseq picks the smallest unsigned type that holds them.
        signed: store int32 instead (positions and offsets that may be -1; fairseq would
            pick an unsigned type, where -1 wraps). fairseq reads both back as int64.

    Attributes:
        dtype: the numpy type the values are stored as.
        items: items added so far.
        tokens: values added so far.
    """

    def __init__(self, prefix: Path, vocab_size: int | None = None, signed: bool = False):
        self.prefix = str(prefix)
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        self.dtype = np.int32 if signed else token_dtype(vocab_size)
        # What fairseq's index writer puts before the sizes: magic, version, the dtype's code.
        self._header = MMAP_MAGIC + struct.pack("<QB", MMAP_VERSION, MMAP_DTYPE_CODES[self.dtype])
        self._data = open(self.prefix + ".bin", "wb")
        self._sizes = array("i")  # int32, as the index stores them
        self.items = self.tokens = 0

    def add(self, ids) -> None:
        """Append one item: a 1-D array, list or tensor of integers."""
        values = np.asarray(ids).astype(self.dtype, copy=False)
        self._data.write(values.tobytes())
        self._sizes.append(len(values))
        self.items += 1
        self.tokens += len(values)

    def finalize(self) -> None:
        """Close the data file and write the index: the header, the item count, each item's
        size (int32) and byte offset (int64)."""
        if self._data.tell() == 0:
            # fairseq maps the .bin whole and cannot map an empty file, which a dataset of
            # empty items is (the gold positions of a split without answers): one element
            # past the last item, which no item reads.
            self._data.write(np.zeros(1, dtype=self.dtype).tobytes())
        self._data.close()
        sizes = np.frombuffer(self._sizes, dtype=np.int32)
        offsets = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        offsets *= np.dtype(self.dtype).itemsize
        with open(self.prefix + ".idx", "wb") as index:
            index.write(self._header + struct.pack("<Q", len(sizes)))
            index.write(sizes.tobytes())
            index.write(offsets.tobytes())


class SplitFiles:
    """One split whose items span several aligned datasets, plus a listing.

    Writes ``{split}.{field}`` for each field and ``{split}.{listing}.jsonl``: item ``i``
    of every field and row ``i`` of the listing belong together, the row holding what
    evaluation needs and the binarized files cannot (ids, gold answers, texts). Use it as
    a context manager, or call :meth:`close`: the datasets are finalized when the block
    ends without an error (after an error, :class:`Staging` discards the files).

    Args:
        directory: where the files go (a staging directory).
        split: the split's name.
        fields: field -> how it is stored: a vocabulary size (ids below it, unsigned) or
            :attr:`SIGNED` (int32, for positions and offsets that may be -1).
        listing: the listing's name: ``examples``, or ``windows`` where an example
            spans several items.

    Attributes:
        lengths: each item's length in tokens, as given to :meth:`add`.
    """

    SIGNED = "signed"
    LENGTH_HEADERS = ("mean tokens", "max")  # a stats table's columns for :meth:`length_stats`

    def __init__(self, directory: Path, split: str, fields: dict[str, int | str], listing: str = "examples"):
        self._datasets = {
            name: MmapWriter(directory / f"{split}.{name}", signed=True)
            if kind == self.SIGNED
            else MmapWriter(directory / f"{split}.{name}", kind)
            for name, kind in fields.items()
        }
        self._listing = open(directory / f"{split}.{listing}.jsonl", "w", encoding="utf-8")
        self.lengths: list[int] = []

    def add(self, row: dict, length: int, **items) -> None:
        """Append one item: its listing row, its length in tokens, and one 1-D array per field."""
        if items.keys() != self._datasets.keys():
            raise TypeError(f"SplitFiles.add: expected fields {sorted(self._datasets)}, got {sorted(items)}")
        for name, values in items.items():
            self._datasets[name].add(values)
        self._listing.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.lengths.append(length)

    def length_stats(self) -> dict:
        """``{"mean_tokens", "longest"}`` over the items added (0 for none)."""
        lengths = np.asarray(self.lengths or [0])
        return {"mean_tokens": float(lengths.mean()), "longest": int(lengths.max())}

    @staticmethod
    def length_cells(split_stats: dict) -> tuple[str, str]:
        """A stats table's cells under :attr:`LENGTH_HEADERS` for a split's :meth:`length_stats`."""
        return f"{split_stats['mean_tokens']:,.0f}", f"{split_stats['longest']:,}"

    def close(self) -> None:
        """Finalize the datasets and close the listing."""
        self._listing.close()
        for dataset in self._datasets.values():
            dataset.finalize()

    def __enter__(self) -> SplitFiles:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is None:
            self.close()
        else:
            self._listing.close()
