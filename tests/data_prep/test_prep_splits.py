"""The split rule every preparation uses (``data_prep.splits``), on counts and keys worked by hand."""

import hashlib

import numpy as np
import pytest

from data_prep.fairseq_dataset import SPLITS, PrepError
from data_prep.splits import SplitSpool, assign_splits, split_key, split_sizes


@pytest.mark.parametrize(
    "total, valid, test, expected",
    [
        (10, 0.01, 0.01, (8, 1, 1)),  # 0.1 rounds to 0: at least one each
        (30, 0.01, 0.01, (28, 1, 1)),
        (300, 0.01, 0.01, (294, 3, 3)),
        (1000, 0.01, 0.02, (970, 10, 20)),
        (20, 0.2, 0.2, (12, 4, 4)),
        (7, 0.3, 0.1, (4, 2, 1)),  # 2.1 -> 2, 0.7 -> 1
        (3, 0.01, 0.01, (1, 1, 1)),  # the smallest corpus for three splits
        (4, 0.49, 0.49, (1, 1, 2)),  # 2 + 2 would leave train nothing: the larger-or-equal valid gives one back
        (2, 0.1, 0.0, (1, 1, 0)),  # a fraction of 0 leaves the split out
        (1, 0.0, 0.0, (1, 0, 0)),
    ],
)
def test_split_sizes(total, valid, test, expected):
    sizes = split_sizes(total, valid, test)
    assert (sizes["train"], sizes["valid"], sizes["test"]) == expected


@pytest.mark.parametrize(
    "total, valid, test, names",
    [(2, 0.01, 0.01, "train, valid and test splits"), (1, 0.0, 0.3, "train and test splits"), (0, 0, 0, "train split")],
)
def test_too_few_says_how_many_there_are_and_what_to_pass(total, valid, test, names):
    with pytest.raises(PrepError) as error:
        split_sizes(total, valid, test, unit="questions", remedy="pass --valid-fraction 0")
    message = str(error.value)
    assert message.startswith(f"{total} questions, too few for the {names} asked for")
    assert message.endswith("; pass --valid-fraction 0") and "\n" not in message


@pytest.mark.parametrize("valid, test", [(-0.1, 0.1), (0.5, 0.5), (1.0, 0.0)])
def test_fractions_must_leave_room_for_train(valid, test):
    with pytest.raises(PrepError, match="need two fractions in"):
        split_sizes(100, valid, test)


def test_assign_splits_ranks_the_keys_and_keeps_equal_keys_together():
    keys = [50, 10, 40, 10, 30, 20, 60, 70, 80, 90]  # 9 distinct keys, 10 a duplicate
    # 9 distinct: test round(0.9) = 1 key (the smallest, 10: both items), valid round(1.8) = 2 (20, 30).
    expected = ["train", "test", "train", "test", "valid", "valid", "train", "train", "train", "train"]
    assert [SPLITS[s] for s in assign_splits(keys, 0.2, 0.1)] == expected
    # The split is a property of the items, not of their order.
    order = np.random.default_rng(0).permutation(len(keys))
    shuffled = assign_splits([keys[i] for i in order], 0.2, 0.1)
    assert [SPLITS[s] for s in shuffled] == [expected[i] for i in order]
    # Keys span the whole unsigned 64-bit range.
    assert [SPLITS[s] for s in assign_splits([2**64 - 1, 0, 2**63], 0.2, 0.2)] == ["train", "test", "valid"]


def test_split_key_is_the_salted_sha1_prefix():
    assert split_key(b"text") == int(hashlib.sha1(b"splittext").hexdigest()[:16], 16)
    assert split_key(b"text", b"seed 2") == int(hashlib.sha1(b"seed 2text").hexdigest()[:16], 16)


def test_spool_gives_items_back_in_order_with_the_rules_splits(tmp_path):
    path = tmp_path / "items.spool"
    spool = SplitSpool(path)
    items = [(f"doc{i}", np.arange(i, dtype=np.uint16)) for i in range(12)]
    keys = [split_key(name.encode()) for name, _ in items]
    for key, item in zip(keys, items, strict=True):
        spool.add(key, item)
    assert len(spool) == 12
    replayed = list(spool.replay(0.25, 0.25))
    assert [split for split, _ in replayed] == [SPLITS[s] for s in assign_splits(keys, 0.25, 0.25)]
    assert sorted(split for split, _ in replayed) == ["test"] * 3 + ["train"] * 6 + ["valid"] * 3
    for (_, (name, ids)), (expected_name, expected_ids) in zip(replayed, items, strict=True):
        assert name == expected_name and ids.dtype == np.uint16 and ids.tolist() == expected_ids.tolist()
    assert not path.exists()  # the spool goes once read


def test_spool_of_too_few_items_raises_before_any_is_given_back(tmp_path):
    spool = SplitSpool(tmp_path / "items.spool")
    spool.add(split_key(b"a"), "a")
    spool.add(split_key(b"b"), "b")
    with pytest.raises(PrepError, match="^2 documents, too few for the train, valid and test splits"):
        next(spool.replay(0.01, 0.01))
