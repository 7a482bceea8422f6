"""text8 and enwik8 as fairseq binarized byte-level datasets.

Conventions (the same for both corpora, so BPC means bits per byte of the file):

- Every byte of the file is one token, newlines included (enwik8 has them; text8 has
  none). No end-of-sentence token is inserted anywhere, so a split of N bytes is
  exactly N tokens and bits-per-character is the loss summed over exactly N scored
  tokens. ``</s>`` exists in ``dict.txt`` only because fairseq's Dictionary has it.
- The vocabulary is the set of bytes seen in the training split, written in
  ``dict.txt`` as ``0xHH`` with their training counts (fairseq's dictionary format
  cannot hold a space or newline as a symbol). Bytes unseen in training map to
  ``<unk>`` and are counted in ``prep.json``.
- Splits are contiguous, in file order: train, valid, test (90M / 5M / 5M for the
  official 100M-byte files, as in the paper).

Output: ``{train,valid,test}.{bin,idx}``, ``dict.txt`` and ``prep.json`` (what was
made from what; a second run with the same inputs does nothing).
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from longformer_fs import output
from longformer_fs.conventions import NUM_SPECIALS, UNK, byte_symbol

from .fairseq_dataset import SPLITS, MmapWriter, PrepError, Staging, file_stamp, up_to_date
from .inputs import wrong_kind

ITEM_TOKENS = 1 << 20  # fairseq items of 1M tokens; break_mode=none joins them back


@dataclass(frozen=True)
class CharCorpus:
    name: str
    url: str
    member: str  # the file inside the zip
    zip_bytes: int
    digest: tuple[str, str]  # (hashlib algorithm, hex digest) of the zip
    split_sizes: tuple[int, int, int]  # train, valid, test bytes

    @property
    def total(self) -> int:
        return sum(self.split_sizes)


CORPORA = {
    "text8": CharCorpus(
        "text8",
        "http://mattmahoney.net/dc/text8.zip",
        "text8",
        31_344_016,
        ("sha1", "3de703932151f5a2c68fc41c5ccf5c76e7d6c366"),
        (90_000_000, 5_000_000, 5_000_000),
    ),
    "enwik8": CharCorpus(
        "enwik8",
        "http://mattmahoney.net/dc/enwik8.zip",
        "enwik8",
        36_445_475,
        ("sha256", "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"),
        (90_000_000, 5_000_000, 5_000_000),
    ),
}


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path, timeout: float = 30.0) -> None:
    """Fetch ``url`` to ``dest`` with a progress bar; a clear error when offline. A failed
    or interrupted download leaves no ``dest``."""
    try:
        with output.written_file(dest) as staged, urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with (
                open(staged, "wb") as out,
                tqdm(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}") as bar,
            ):
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError) as err:
        raise PrepError(f"cannot download {url} ({err}); download it elsewhere and pass --zip PATH") from err


def read_corpus(corpus: CharCorpus, zip_path: Path, verify: bool) -> bytes:
    """The corpus bytes from its official zip, after checking the zip is the official one."""
    if zip_path.stat().st_size == 0:
        raise PrepError(f"--zip: {zip_path} is empty; re-download it")
    problem = wrong_kind(zip_path, "a zip archive", accept=("zip archive",))
    if problem:
        raise PrepError(f"--zip: {zip_path} is {problem}")
    if verify:
        algorithm, expected = corpus.digest
        actual = file_digest(zip_path, algorithm)
        if actual != expected:
            raise PrepError(
                f"--zip: {zip_path} has {algorithm} {actual}, but the official {corpus.name}.zip "
                f"({corpus.zip_bytes:,} bytes) has {expected}. Re-download it, or pass "
                f"--skip-checksum to use a different file on purpose"
            )
    try:
        with zipfile.ZipFile(zip_path) as archive:
            if corpus.member not in archive.namelist():
                raise PrepError(
                    f"--zip: {zip_path} has no member {corpus.member!r} (it holds {archive.namelist()[:5]})"
                )
            return archive.read(corpus.member)
    except (zipfile.BadZipFile, EOFError) as err:
        raise PrepError(f"--zip: {zip_path} is not a readable zip file ({err}); re-download it") from err


def split_bounds(n_bytes: int, sizes: tuple[int, int, int]) -> list[tuple[int, int]]:
    if sum(sizes) != n_bytes:
        raise PrepError(
            f"the file has {n_bytes:,} bytes but the splits {sizes} add up to {sum(sizes):,}; "
            f"pass --split-sizes TRAIN,VALID,TEST that sum to the file size"
        )
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def write_split(tokens: np.ndarray, prefix: Path, vocab_size: int, progress) -> None:
    """One fairseq mmap dataset of 1M-token items (no eos)."""
    writer = MmapWriter(prefix, vocab_size)
    for start in range(0, len(tokens), ITEM_TOKENS):
        chunk = tokens[start : start + ITEM_TOKENS]
        writer.add(chunk)
        progress.update(len(chunk))
    writer.finalize()


def build_dictionary(train: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Byte -> token id lookup (fairseq order: the specials, then bytes by count)."""
    counts = np.bincount(train, minlength=256)
    seen = [(int(b), int(counts[b])) for b in np.argsort(-counts, kind="stable") if counts[b] > 0]
    lookup = np.full(256, UNK, dtype=np.uint16)
    for index, (byte, _) in enumerate(seen):
        lookup[byte] = NUM_SPECIALS + index
    return lookup, seen


def prepare(
    name: str,
    out: Path,
    zip_path: Path | None = None,
    download_missing: bool = False,
    verify: bool = True,
    split_sizes: tuple[int, int, int] | None = None,
    force: bool = False,
    url: str | None = None,
) -> dict:
    """Prepare ``name`` ("text8" or "enwik8") into ``out``; returns the manifest."""
    corpus = CORPORA[name]
    out = Path(out)
    zip_path = Path(zip_path) if zip_path is not None else out / f"{name}.zip"
    if not zip_path.is_file() and download_missing:
        out.mkdir(parents=True, exist_ok=True)
        download(url or corpus.url, zip_path)
    if not zip_path.is_file():
        raise PrepError(f"--zip: {zip_path} does not exist; download {corpus.url} or pass --download")
    sizes = tuple(split_sizes) if split_sizes else corpus.split_sizes
    inputs = {"zip": file_stamp(zip_path), "split_sizes": list(sizes), "verified": verify}
    previous = up_to_date(out, name, inputs, force)
    if previous is not None:
        return previous

    data = np.frombuffer(read_corpus(corpus, zip_path, verify), dtype=np.uint8)
    return write_dataset(data, out, sizes, name, inputs)


def write_dataset(data: np.ndarray, out: Path, sizes: tuple[int, int, int], kind: str, inputs: dict) -> dict:
    """Split ``data`` (uint8 bytes) in file order and binarize it into ``out``; returns the manifest."""
    bounds = split_bounds(len(data), sizes)
    lookup, seen = build_dictionary(data[bounds[0][0] : bounds[0][1]])
    with Staging(out) as staging:
        (staging.dir / "dict.txt").write_text("".join(f"{byte_symbol(byte)} {count}\n" for byte, count in seen))
        unknown = {}
        with tqdm(total=len(data), unit="B", unit_scale=True, desc=f"binarize {kind}") as progress:
            for split, (lo, hi) in zip(SPLITS, bounds, strict=True):
                tokens = lookup[data[lo:hi]]
                unknown[split] = int((tokens == UNK).sum())
                write_split(tokens, staging.dir / split, NUM_SPECIALS + len(seen), progress)
        return staging.publish(
            kind,
            inputs,
            corpus=kind,
            tokens={s: hi - lo for s, (lo, hi) in zip(SPLITS, bounds, strict=True)},
            vocab_bytes=len(seen),
            unknown_tokens=unknown,
        )
