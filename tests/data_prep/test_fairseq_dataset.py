"""The core every preparation shares: special ids, the output guard, manifests, staging, the split rule."""

import json

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from data_prep.fairseq_dataset import (
    MANIFEST,
    MmapWriter,
    PrepError,
    Staging,
    aligned_table,
    batched,
    file_stamp,
    finished_manifest,
    up_to_date,
)
from longformer_fs.conventions import BOS, EOS, NUM_SPECIALS, PAD, SPECIAL_SYMBOLS, UNK


def test_special_ids_are_fairseqs():
    d = Dictionary()
    assert (d.bos(), d.pad(), d.eos(), d.unk()) == (BOS, PAD, EOS, UNK)
    assert [d[i] for i in range(NUM_SPECIALS)] == list(SPECIAL_SYMBOLS) and len(d) == NUM_SPECIALS


def test_a_preparation_publishes_its_manifest_last_and_a_rerun_finds_it(tmp_path):
    """Staging is longformer_fs.output's (tests/test_output.py): here, the manifest it writes."""
    out = tmp_path / "out"
    with Staging(out) as staging:
        for name in ("train.txt", "test.txt"):
            (staging.dir / name).write_text("new")
        assert finished_manifest(out, "kind", {"a": 1}) is None
        manifest = staging.publish("kind", {"a": 1}, rows=3)
    assert not staging.dir.exists() and (out / "train.txt").read_text() == "new"
    assert json.loads((out / MANIFEST).read_text()) == manifest
    assert manifest == {
        "format": 3,
        "kind": "kind",
        "inputs": {"a": 1},
        "rows": 3,
        "written": ["test.txt", "train.txt"],
    }
    assert finished_manifest(out, "kind", {"a": 1}) == manifest
    assert finished_manifest(out, "kind", {"a": 2}) is None
    assert finished_manifest(out, "other", {"a": 1}) is None
    (out / "notes.txt").write_text("mine")
    with Staging(out) as again:  # a second run, without a test split: the old one would pass for its
        (again.dir / "train.txt").write_text("newer")
        again.publish("kind", {"a": 2})
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, "notes.txt", "train.txt"])
    assert finished_manifest(out, "kind", {"a": 1}) is None and finished_manifest(out, "kind", {"a": 2})


@pytest.mark.parametrize("error", [PrepError("bad input"), KeyboardInterrupt()])
def test_a_failed_preparation_leaves_nothing_it_staged(tmp_path, error):
    out = tmp_path / "new" / "out"
    with pytest.raises(type(error)), Staging(out) as staging:
        (staging.dir / "train.bin").write_text("half")
        raise error
    assert not (tmp_path / "new").exists()  # nothing, not even the folders it made


def test_the_guard_speaks_as_prep_does(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PrepError, match=r"holds files this command did not write \(notes.txt\)"):
        up_to_date(out, "kind", {}, force=False)
    assert up_to_date(out, "kind", {}, force=True) is None and (out / "notes.txt").read_text() == "mine"


def test_file_stamp_and_batched(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("abc")
    before = file_stamp(path)
    assert (before["file"], before["size"]) == (str(path.resolve()), 3)
    path.write_text("abcd")
    assert file_stamp(path) != before
    assert list(batched(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched([], 3)) == []


def test_aligned_table_pads_names_left_and_numbers_right():
    rows = [("split", "docs", "labels"), ("train", "1,000", "a:1 b:2"), ("valid", "7", "a:1")]
    assert aligned_table(rows, left=(0, 2)) == ("split   docs  labels \ntrain  1,000  a:1 b:2\nvalid      7  a:1    ")
    assert aligned_table(rows).splitlines()[2] == "valid      7      a:1"


def test_mmap_writer_round_trips_through_fairseq(tmp_path):
    from fairseq.data import data_utils

    writer = MmapWriter(tmp_path / "split", vocab_size=1000)
    writer.add([4, 5, 6])
    writer.add(np.array([999]))
    writer.add(torch.tensor([7]))
    writer.finalize()
    assert (writer.items, writer.tokens) == (3, 5)
    dataset = data_utils.load_indexed_dataset(str(tmp_path / "split"), None, "mmap")
    assert [dataset[i].tolist() for i in range(len(dataset))] == [[4, 5, 6], [999], [7]]


@pytest.mark.parametrize(
    "items, vocab_size, signed",
    [
        ([[4, 5, 6], [], [999], [2]], 1000, False),  # uint16, an empty item
        ([[70000, 4], [2]], 70000, False),  # uint32
        ([[5, 6]], None, False),  # no vocabulary size: uint32
        ([[-1, -1, 3], [0]], None, True),  # signed offsets
        ([], 50, False),  # no item at all
    ],
)
def test_mmap_writer_files_are_fairseqs_builders_byte_for_byte(tmp_path, items, vocab_size, signed):
    from fairseq.data import indexed_dataset

    ours = MmapWriter(tmp_path / "ours", vocab_size, signed)
    assert ours.dtype == (np.int32 if signed else indexed_dataset.best_fitting_int_dtype(vocab_size))
    theirs = indexed_dataset.MMapIndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=ours.dtype)
    for item in items:
        ours.add(item)
        theirs.add_item(torch.tensor(item, dtype=torch.int64))
    ours.finalize()
    theirs.finalize(str(tmp_path / "theirs.idx"))
    assert (tmp_path / "ours.idx").read_bytes() == (tmp_path / "theirs.idx").read_bytes()
    bin_ours, bin_theirs = (tmp_path / "ours.bin").read_bytes(), (tmp_path / "theirs.bin").read_bytes()
    if any(items):
        assert bin_ours == bin_theirs
    else:  # fairseq cannot map the empty .bin its builder writes: ours holds one unread element
        assert bin_theirs == b"" and len(bin_ours) == np.dtype(ours.dtype).itemsize
        dataset = indexed_dataset.MMapIndexedDataset(str(tmp_path / "ours"))
        assert [dataset[i].tolist() for i in range(len(dataset))] == [[] for _ in items]
