"""How every preparation cuts one input into train/valid/test: one rule, :func:`assign_splits`.

Every item to split has a key (:func:`split_key`, a hash of what identifies it: a
document's text, a TriviaQA question's id). The distinct keys are sorted; test takes the
first ``round(test_fraction * n)``, valid the next ``round(valid_fraction * n)`` and
train the rest, where ``n`` counts distinct keys and:

- a split asked for (fraction above zero) gets at least one key, and train always does;
  so train, valid and test need at least three keys, and fewer is a :class:`PrepError`
  that says how many there are and what to pass;
- items that share a key share a split: an exact copy of a document never lands in test
  while the original trains, nor do two entity pages of one question.

Hashes make the split a property of the corpus, not of the order it was read in: the
same inputs always split the same way, and a salt (``prep classification --seed``) picks
another. Growing the corpus can move items near a boundary.

The rule needs every key before the first item is placed. :class:`SplitSpool` keeps the
items of a streamed input on disk meanwhile, so memory holds their keys only (8 bytes
an item).
"""

from __future__ import annotations

import hashlib
import math
import pickle
from array import array
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .fairseq_dataset import SPLITS, PrepError

TRAIN, VALID, TEST = (SPLITS.index(s) for s in ("train", "valid", "test"))
FRACTIONS_REMEDY = "pass --valid-fraction 0 and/or --test-fraction 0 to leave a split out, or add more input"


def split_key(data: bytes, salt: bytes = b"split") -> int:
    """A 64-bit key fixed by ``data``: the first 8 bytes of SHA-1(salt + data)."""
    return int.from_bytes(hashlib.sha1(salt + data).digest()[:8], "big")


def check_fractions(valid_fraction: float, test_fraction: float) -> None:
    """PrepError unless both fractions are in [0, 1) and leave room for train."""
    if not (0 <= valid_fraction < 1 and 0 <= test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise PrepError("--valid-fraction/--test-fraction: need two fractions in [0, 1) summing below 1")


def check_split_inputs(
    files: dict,
    input: Path | None,
    valid_fraction: float | None = None,
    test_fraction: float | None = None,
    need_train: bool = False,
    folders: bool = False,
) -> None:
    """PrepError unless a preparation was given either split files or one file to split.

    Args:
        files: ``{split: path}`` of ``--train/--valid/--test``; each must exist.
        input: ``--input``, the one file to split (by the fractions, when given).
        need_train: split files must include ``--train`` (a classifier has nothing to
            learn from otherwise).
        folders: a folder may stand for a file (``prep classification`` reads a folder of
            label folders).
    """
    exists = Path.exists if folders else Path.is_file
    if input is not None and files:
        raise PrepError("give either --input (one file to split) or --train/--valid/--test files, not both")
    if input is None and (not files or (need_train and "train" not in files)):
        wanted = "--train (and --valid/--test)" if need_train else "at least one of --train, --valid, --test"
        raise PrepError(f"give {wanted}, or one --input to split")
    for split, path in files.items():
        if split not in SPLITS:
            raise PrepError(f"splits: {split!r} is not one of {', '.join(SPLITS)}")
        if not exists(Path(path)):
            raise PrepError(f"--{split}: {path} not found")
    if input is not None:
        if not exists(Path(input)):
            raise PrepError(f"--input: {input} not found")
        if valid_fraction is not None:
            check_fractions(valid_fraction, test_fraction)


def split_sizes(
    total: int, valid_fraction: float, test_fraction: float, unit: str = "documents", remedy: str = FRACTIONS_REMEDY
) -> dict[str, int]:
    """How many of ``total`` keys each split gets (the rule in the module docstring).

    Args:
        unit: what a key stands for, in the error ("documents", "questions").
        remedy: what the error tells the user to do (the command's own option names).
    """
    check_fractions(valid_fraction, test_fraction)
    asked = ["train"] + [name for name, f in (("valid", valid_fraction), ("test", test_fraction)) if f > 0]
    if total < len(asked):
        names = " and ".join(", ".join(asked).rsplit(", ", 1))
        raise PrepError(
            f"{total} {unit}, too few for the {names} split{'s' * (len(asked) > 1)} asked for: each needs at "
            f"least one, so {len(asked)} {unit} at least; {remedy}"
        )

    def share(fraction: float) -> int:
        return max(1, math.floor(fraction * total + 0.5)) if fraction > 0 else 0

    valid, test = share(valid_fraction), share(test_fraction)
    while total - valid - test < 1:  # give train its one key from the larger of the others
        if valid >= test and valid > 1:
            valid -= 1
        else:
            test -= 1
    return {"train": total - valid - test, "valid": valid, "test": test}


def assign_splits(
    keys: Sequence[int],
    valid_fraction: float,
    test_fraction: float,
    unit: str = "documents",
    remedy: str = FRACTIONS_REMEDY,
) -> np.ndarray:
    """Each item's split, as an index into :data:`SPLITS` (int8), by the rule of the module docstring.

    Args:
        keys: one per item, in the items' order (:func:`split_key` values).
    """
    distinct, owner = np.unique(np.asarray(keys, dtype=np.uint64), return_inverse=True)
    sizes = split_sizes(len(distinct), valid_fraction, test_fraction, unit, remedy)
    by_rank = np.full(len(distinct), TRAIN, dtype=np.int8)
    by_rank[: sizes["test"]] = TEST
    by_rank[sizes["test"] : sizes["test"] + sizes["valid"]] = VALID
    return by_rank[owner.reshape(-1)]


class SplitSpool:
    """Items of a streamed input, kept on disk in arrival order until every key is known.

    :meth:`add` pickles each item to ``path`` (inside the preparation's staging directory,
    so an interrupted run's spool goes with it); :meth:`replay` hands them back in the same
    order with their splits, and deletes the file.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.file = open(self.path, "wb")
        self.keys = array("Q")

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: int, item: Any) -> None:
        pickle.dump(item, self.file, protocol=pickle.HIGHEST_PROTOCOL)
        self.keys.append(key)

    def replay(
        self, valid_fraction: float, test_fraction: float, unit: str = "documents", remedy: str = FRACTIONS_REMEDY
    ) -> Iterator[tuple[str, Any]]:
        """``(split, item)`` for every item added, in order (the split by :func:`assign_splits`)."""
        self.file.close()
        splits = assign_splits(self.keys, valid_fraction, test_fraction, unit, remedy)
        try:
            with open(self.path, "rb") as items:
                for index in splits:
                    yield SPLITS[index], pickle.load(items)
        finally:
            self.path.unlink(missing_ok=True)
