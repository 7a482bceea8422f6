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
    guard_out_dir,
)
from longformer_fs.conventions import BOS, EOS, NUM_SPECIALS, PAD, SPECIAL_SYMBOLS, UNK


def test_special_ids_are_fairseqs():
    d = Dictionary()
    assert (d.bos(), d.pad(), d.eos(), d.unk()) == (BOS, PAD, EOS, UNK)
    assert [d[i] for i in range(NUM_SPECIALS)] == list(SPECIAL_SYMBOLS) and len(d) == NUM_SPECIALS


def test_guard_accepts_new_and_own_files_and_refuses_others(tmp_path):
    out = tmp_path / "a" / "b"
    guard_out_dir(out, {"dict.txt"}, force=False)
    assert not out.exists()  # created by Staging, so a run that fails on its inputs leaves nothing
    out.mkdir(parents=True)
    (out / "dict.txt").write_text("x 1\n")
    (out / MANIFEST).write_text("{}")
    guard_out_dir(out, {"dict.txt"}, force=False)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PrepError, match=r"holds files this command did not write \(notes.txt\)"):
        guard_out_dir(out, {"dict.txt"}, force=False)
    guard_out_dir(out, {"dict.txt"}, force=True)
    assert (out / "notes.txt").read_text() == "mine"  # --force never deletes what it did not write
    (tmp_path / "file").write_text("")
    with pytest.raises(PrepError, match="is a file"):
        guard_out_dir(tmp_path / "file", set(), force=False)


def test_staging_publishes_everything_and_the_manifest_last(tmp_path):
    out = tmp_path / "out"
    with Staging(out) as staging:
        (staging.dir / "train.txt").write_text("new")
        (staging.dir / "sub").mkdir()
        (staging.dir / "sub" / "f").write_text("1")
        assert finished_manifest(out, "kind", {"a": 1}) is None
        manifest = staging.publish("kind", {"a": 1}, rows=3)
    assert (out / "train.txt").read_text() == "new" and (out / "sub" / "f").read_text() == "1"
    assert not staging.dir.exists()
    assert (
        json.loads((out / MANIFEST).read_text())
        == manifest
        == {"format": 2, "kind": "kind", "inputs": {"a": 1}, "rows": 3}
    )
    assert finished_manifest(out, "kind", {"a": 1}) == manifest
    assert finished_manifest(out, "kind", {"a": 2}) is None
    assert finished_manifest(out, "other", {"a": 1}) is None

    with Staging(out) as again:  # a second run
        (again.dir / "train.txt").write_text("newer")
        (again.dir / "sub").mkdir()
        assert (out / MANIFEST).is_file()
        again.publish("kind", {"a": 2})
    assert (out / "train.txt").read_text() == "newer" and not (out / "sub" / "f").exists()


@pytest.mark.parametrize("error", [PrepError("bad input"), KeyboardInterrupt()])
def test_a_failed_run_leaves_nothing_it_staged(tmp_path, error):
    out = tmp_path / "new" / "out"
    with pytest.raises(type(error)), Staging(out) as staging:
        (staging.dir / "train.bin").write_text("half")
        raise error
    assert not out.exists()  # this run created it: it goes, empty
    # A directory that existed keeps what it had, finished outputs and manifest included.
    with Staging(out) as staging:
        (staging.dir / "train.bin").write_text("old")
        staging.publish("kind", {"a": 1})
    with pytest.raises(type(error)), Staging(out) as staging:
        (staging.dir / "train.bin").write_text("half")
        raise error
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "train.bin"]
    assert (out / "train.bin").read_text() == "old" and finished_manifest(out, "kind", {"a": 1})
    # An interrupted run killed outright leaves .partial; the next run clears it first.
    (out / ".partial").mkdir()
    (out / ".partial" / "stale.bin").write_text("x")
    with Staging(out) as staging:
        assert list(staging.dir.iterdir()) == []


def test_publish_removes_owned_files_this_run_did_not_write(tmp_path):
    out = tmp_path / "out"
    with Staging(out) as first:
        for name in ("dict.txt", "train.bin", "test.bin"):
            (first.dir / name).write_text("1")
        first.publish("kind", {})
    (out / "notes.txt").write_text("mine")
    with Staging(out) as second:  # this run has no test split
        for name in ("dict.txt", "train.bin"):
            (second.dir / name).write_text("2")
        second.publish("kind", {}, owned={"dict.txt", "train.bin", "test.bin", "valid.bin"})
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, "dict.txt", "notes.txt", "train.bin"])
    assert (out / "train.bin").read_text() == "2"


def test_file_stamp_and_batched(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("abc")
    before = file_stamp(path)
    assert before[:2] == [str(path.resolve()), 3]
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
