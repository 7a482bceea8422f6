"""Long-document corpora as fairseq masked-LM datasets (``longformer-fs prep docs``).

Pipeline, streamed so memory does not grow with the corpus:

1. **read** every source in the order given (PDFs are extracted in worker processes);
   bad input becomes a :class:`~.doc_sources.Skipped` record, never an exception;
2. **filter**: exact duplicates (by SHA-1 of the text, across sources) and the
   per-source sampling fraction (a hash decides, so reruns keep the same documents);
3. **tokenize** in ``--workers`` processes with a subword encoder
   (:mod:`data_prep.subword`: GPT-2 byte-level BPE mapped to the model's ``dict.txt``,
   or SentencePiece); then the per-source minimum length in tokens;
4. **split**: the tokenized documents wait on disk (:class:`~.splits.SplitSpool`) until
   all are counted, then :func:`~.splits.assign_splits` places them by a hash of the
   text: valid and test get their fractions of the documents, at least one each, and a
   corpus too small for the splits asked for is an error;
5. **write** train/valid/test in fairseq's mmap format: one item per paragraph ending
   in ``</s>``, and an item holding only ``</s>`` after each document, the layout
   fairseq-preprocess gives text with blank lines between documents. So
   ``sample_break_mode=complete_doc`` never crosses a document and ``eos`` yields
   paragraphs.

Everything is staged beside ``OUT`` and moved in at the end; ``prep.json``, moved
in last, marks a finished dataset and records the inputs, so a rerun with the
same inputs does nothing and an interrupted run never looks complete. A run that
stops on an error or Ctrl-C removes what it staged.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import EOS, PrepKind
from longformer_fs.tokenization import SubwordSpec

from .doc_sources import READERS, Document, Item, Skipped, SourceSpec, read_pdf
from .fairseq_dataset import SPLITS, MmapWriter, PrepError, Staging, aligned_table, batched, file_stamp, previous_stats
from .splits import SplitSpool, check_fractions, split_key
from .tokenizer_pool import load_encoder, process_encoder, tokenizer_pool

KIND = PrepKind.DOCS
BATCH_DOCS = 64  # documents per tokenizer task


@dataclass(frozen=True)
class DocPrepConfig:
    sources: tuple[SourceSpec, ...]
    subword: SubwordSpec
    min_tokens: dict = field(default_factory=dict)  # source -> tokens
    fractions: dict = field(default_factory=dict)  # source -> kept fraction
    valid_fraction: float = 0.01
    test_fraction: float = 0.01
    workers: int = 1


# Why a document read is not written, with the words the reports use.
DROPPED = {"duplicate": "duplicates", "sampled_out": "sampled out", "too_short": "too short"}


@dataclass
class SourceStats:
    """Where one source's documents went: each document read was either kept (written to
    a split) or dropped for one of the reasons in :data:`DROPPED`.

    Attributes:
        documents: documents kept.
        tokens: subword tokens in the kept documents.
        characters: characters in the kept documents.
        dropped: reason -> documents dropped: ``duplicate`` (the same text, stripped,
            came earlier from any source), ``sampled_out`` (by the source's
            ``fractions`` entry), ``too_short`` (under the source's ``min_tokens``).
        skipped: inputs that yielded no document (an unreadable file, a malformed line).
    """

    documents: int = 0
    tokens: int = 0
    characters: int = 0
    dropped: Counter = field(default_factory=Counter)
    skipped: int = 0

    @property
    def read(self) -> int:
        """Documents the source's reader produced."""
        return self.documents + sum(self.dropped.values())

    def as_dict(self) -> dict:
        """The source's row of ``stats.json``: every count, by name."""
        counts = {"read": self.read, "documents": self.documents, "tokens": self.tokens}
        counts |= {reason: self.dropped[reason] for reason in DROPPED}
        return {**counts, "skipped": self.skipped, "characters": self.characters}


# ---------------------------------------------------------------- worker side


def _tokenize(texts: list[str]) -> list[list[np.ndarray]]:
    """Per document, one id array per non-empty paragraph (no ``</s>`` yet)."""
    paragraphs, owners = [], []
    for doc, text in enumerate(texts):
        for line in text.split("\n"):
            if line.strip():
                paragraphs.append(line)
                owners.append(doc)
    out: list[list[np.ndarray]] = [[] for _ in texts]
    for owner, ids in zip(owners, process_encoder().encode(paragraphs), strict=True):
        out[owner].append(ids)
    return out


def _read_pdf_task(args: tuple[SourceSpec, Path]) -> Item:
    return read_pdf(*args)


# ---------------------------------------------------------------- driver side


def iter_items(cfg: DocPrepConfig, pool) -> Iterator[Item]:
    """Every document and skip record of every source, in a fixed order."""
    for spec in cfg.sources:
        files = spec.files()
        if spec.kind == "pdf":
            tasks = [(spec, path) for path in files]
            yield from (pool.imap(_read_pdf_task, tasks, chunksize=4) if pool else map(_read_pdf_task, tasks))
        else:
            for path in files:
                yield from READERS[spec.kind](spec, path)


class _SplitWriter:
    """The three splits, written document by document; ``dtype`` is how they store ids."""

    def __init__(self, directory: Path, dict_size: int):
        self.writers = {s: MmapWriter(directory / s, dict_size) for s in SPLITS}
        self.dtype = self.writers["train"].dtype
        self.tokens = Counter()
        self.documents = Counter()

    def add_document(self, split: str, paragraphs: list[np.ndarray]) -> None:
        writer = self.writers[split]
        for ids in paragraphs:
            writer.add(np.append(ids, EOS))
        writer.add(np.array([EOS]))  # the document boundary
        self.tokens[split] += sum(len(p) for p in paragraphs)
        self.documents[split] += 1

    def finalize(self) -> None:
        for writer in self.writers.values():
            writer.finalize()


def input_manifest(cfg: DocPrepConfig) -> dict:
    """What the output depends on: every input file's size and mtime, and every option."""

    return {
        "sources": [
            {
                "name": s.name,
                "kind": s.kind,
                "path": str(s.path.resolve()),
                "text_field": s.text_field,
                "files": [file_stamp(p) for p in s.files()],
            }
            for s in cfg.sources
        ],
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
        "min_tokens": dict(sorted(cfg.min_tokens.items())),
        "fractions": dict(sorted(cfg.fractions.items())),
        "valid_fraction": cfg.valid_fraction,
        "test_fraction": cfg.test_fraction,
    }


def _check_config(cfg: DocPrepConfig) -> None:
    names = {s.name for s in cfg.sources}
    if not cfg.sources:
        raise PrepError("--source: give at least one NAME=KIND:PATH")
    for option, values in (("--min-tokens", cfg.min_tokens), ("--fraction", cfg.fractions)):
        unknown = sorted(set(values) - names)
        if unknown:
            raise PrepError(f"{option}: no source named {', '.join(unknown)} (sources: {', '.join(sorted(names))})")
    for name, fraction in cfg.fractions.items():
        if not 0 < fraction <= 1:
            raise PrepError(f"--fraction: {name}={fraction} is not in (0, 1]")
    check_fractions(cfg.valid_fraction, cfg.test_fraction)
    if cfg.workers < 1:
        raise PrepError(f"--workers: must be >= 1, got {cfg.workers}")


def prepare_docs(cfg: DocPrepConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    _check_config(cfg)
    out = Path(out)
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    encoder = load_encoder(cfg.subword)  # in the parent too: bad tokenizer files fail here, and workers=1 runs here
    # Every source gets a row, even one that yields nothing.
    stats: dict[str, SourceStats] = {spec.name: SourceStats() for spec in cfg.sources}
    skips: list[Skipped] = []
    no_abstract: list[dict] = []  # papers kept with their body only: reported, not fatal
    abstracts = Counter()  # how each paper's abstract was found (pdf_papers.FOUND)
    seen: set[bytes] = set()
    with Staging(out) as staging:
        writer = _SplitWriter(staging.dir, encoder.dictionary_size)
        spool = SplitSpool(staging.dir / "documents.spool")
        pool = tokenizer_pool(cfg.workers, cfg.subword)
        papers = open(staging.dir / "papers.jsonl", "w", encoding="utf-8")
        read_bar = tqdm(desc="read", unit=" docs", position=0)
        token_bar = tqdm(desc="tokenize", unit="B", unit_scale=True, position=1)
        try:

            def kept_documents() -> Iterator[tuple[Document, bytes]]:
                for item in iter_items(cfg, pool):
                    read_bar.update()
                    if isinstance(item, Skipped):
                        stats[item.source].skipped += 1
                        skips.append(item)
                        continue
                    st = stats[item.source]
                    text = item.text.strip()
                    digest = hashlib.sha1(text.encode("utf-8")).digest()
                    if digest in seen:
                        st.dropped["duplicate"] += 1
                        continue
                    seen.add(digest)
                    # A hash, not a random draw: a rerun keeps the same documents.
                    if split_key(digest, b"sample") / 2**64 >= cfg.fractions.get(item.source, 1.0):
                        st.dropped["sampled_out"] += 1
                        continue
                    if item.paper is not None:
                        abstracts[item.paper.found.get("abstract", "none")] += 1
                        if item.paper.abstract is None:
                            no_abstract.append({"origin": item.origin, "reason": item.paper.abstract_missing})
                        record = {"source": item.source, "file": item.origin, **item.paper.record()}
                        papers.write(json.dumps(record, ensure_ascii=False) + "\n")
                    yield item, digest

            # Chunks of batches go to the pool together: results come back in order, and
            # memory holds one chunk of texts however large the corpus.
            batches = batched(kept_documents(), BATCH_DOCS)
            while chunk := list(itertools.islice(batches, 4 * cfg.workers)):
                texts = [[doc.text for doc, _ in batch] for batch in chunk]
                for batch, tokens in zip(chunk, (pool.imap if pool else map)(_tokenize, texts), strict=True):
                    for (doc, digest), paragraphs in zip(batch, tokens, strict=True):
                        token_bar.update(len(doc.text.encode("utf-8")))
                        st = stats[doc.source]
                        count = sum(len(p) for p in paragraphs)
                        if count < max(cfg.min_tokens.get(doc.source, 1), 1):
                            st.dropped["too_short"] += 1
                            continue
                        spool.add(split_key(digest), [p.astype(writer.dtype) for p in paragraphs])
                        st.documents += 1
                        st.tokens += count
                        st.characters += len(doc.text)
        finally:
            read_bar.close()
            token_bar.close()
            papers.close()
            if pool is not None:
                pool.terminate()
        if not spool:
            raise _nothing_kept(stats, skips, cfg.sources)
        placed = spool.replay(cfg.valid_fraction, cfg.test_fraction)
        for split, paragraphs in tqdm(placed, total=len(spool), desc="write", unit=" docs"):
            writer.add_document(split, paragraphs)
        writer.finalize()

        encoder.write_dictionary(staging.dir / "dict.txt")
        result = {
            "sources": {name: st.as_dict() for name, st in stats.items()},
            "splits": {s: {"documents": writer.documents[s], "tokens": writer.tokens[s]} for s in SPLITS},
            "papers": {
                "count": sum(abstracts.values()),
                "abstract_found": dict(abstracts),
                "without_abstract": {
                    "count": len(no_abstract),
                    "by_reason": dict(Counter(p["reason"] for p in no_abstract)),
                    "examples": no_abstract[:50],
                },
            },
            "skipped": {
                "count": len(skips),
                "by_reason": dict(Counter(_reason_kind(s.reason) for s in skips)),
                "examples": [asdict(s) for s in skips[:50]],
            },
        }
        staging.publish(KIND, inputs, stats=result, splits=result["splits"])
    return result


def _nothing_kept(stats: dict[str, SourceStats], skips: list[Skipped], sources) -> PrepError:
    """The error for a run that kept no document, with where they went, and the folders
    that held no file of their source's kind (a txt folder of files without ``.txt``)."""
    parts = [f"{sum(st.read for st in stats.values())} read"]
    for spec in sources:
        if spec.path.is_dir() and not spec.files():
            parts.append(f"--source {spec.name}: no {'/'.join(spec.suffixes)} file under {spec.path}")
    for reason, label in DROPPED.items():
        dropped = sum(st.dropped[reason] for st in stats.values())
        if dropped:
            parts.append(f"{dropped} {label}")
    if skips:
        parts.append(f"{len(skips)} skipped, the first: {skips[0].origin}: {skips[0].reason}")
    return PrepError(f"no document to write ({'; '.join(parts)})")


def _reason_kind(reason: str) -> str:
    """Group skip reasons for the summary ("malformed JSON (...)" -> "malformed JSON")."""
    return reason.split(" (", 1)[0]


def stats_table(result: dict) -> str:
    """The paper's Table 5 in spirit: tokens and average document length per source; then
    the documents and tokens of each split."""
    rows = [("source", "documents", "tokens", "avg tokens/doc", "dropped: short/dup/sampled/bad")]
    total_docs = total_tokens = 0
    for name, st in result["sources"].items():
        avg = st["tokens"] / st["documents"] if st["documents"] else 0
        rows.append(
            (
                name,
                f"{st['documents']:,}",
                f"{st['tokens']:,}",
                f"{avg:,.0f}",
                f"{st['too_short']}/{st['duplicate']}/{st['sampled_out']}/{st['skipped']}",
            )
        )
        total_docs += st["documents"]
        total_tokens += st["tokens"]
    rows.append(
        ("total", f"{total_docs:,}", f"{total_tokens:,}", f"{total_tokens / total_docs if total_docs else 0:,.0f}", "")
    )
    splits = [("split", "documents", "tokens")]
    splits += [(name, f"{st['documents']:,}", f"{st['tokens']:,}") for name, st in result["splits"].items()]
    return aligned_table(rows) + "\n\n" + aligned_table(splits)
