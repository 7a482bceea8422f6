"""Document/summary pairs as fairseq ``translation`` data (``longformer-fs prep summarization``).

The layout is what ``fairseq-preprocess --source-lang source --target-lang target`` gives,
so ``--task translation -s source -t target`` (and LED fine-tuning) reads it as it is::

    dict.source.txt, dict.target.txt               both the model's dictionary
    {split}.source-target.source.{bin,idx}         per pair: <s> document tokens </s>
    {split}.source-target.target.{bin,idx}         per pair: summary tokens </s>
    {split}.references.jsonl                       per pair, in dataset order:
                                                   {"id": ..., "reference": "sentence\\nsentence"}
    stats.json, prep.json

Sources start with ``<s>`` as BART's hub encodes them: LED puts global attention on that
first token. A source longer than ``max_source_tokens`` (``<s>`` and ``</s>`` counted;
LED has 16384 positions) loses its end; a summary longer than ``max_target_tokens``
(``</s>`` counted) too. The references keep the whole summary, one sentence per line, for
ROUGE-Lsum (``longformer-fs rouge``).

Inputs (:data:`LAYOUTS`), one JSON object per line:

- ``papers``: the ``papers.jsonl`` of ``prep docs`` (body -> abstract; id: the PDF's path; a
  paper without an abstract is reported with the reason ``prep docs`` gave);
- ``arxiv``: the arXiv/PubMed release of Cohan et al. (2018): ``article_text`` (a list of
  sentences, joined by spaces) -> ``abstract_text`` (sentences, each in ``<S> ... </S>``,
  the tags stripped); id: ``article_id``. ``section_names``/``sections`` are not used;
- ``jsonl``: named fields; a field is a string or a list of strings (sentences). A string
  summary is split into sentences at newlines, or else by :func:`longformer_fs.conventions.split_sentences`.

Splits come from files (``--train/--valid/--test``), or from one input that
:func:`~.splits.assign_splits` cuts by a hash of the source text: valid and test get their
fractions of the pairs, at least one each, and identical documents share a split.

Lines that are not JSON objects, or lack a field, are reported and skipped; so are pairs
with an empty side (a paper without an abstract). A file where no line has the fields is
an error: the field names are wrong; so is a file of another kind (a PDF), and a split
left without a pair.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Union

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import BOS, EOS, SOURCE, TARGET, PrepKind, jsonl_records, split_sentences
from longformer_fs.tokenization import SubwordSpec

from .fairseq_dataset import SPLITS, MmapWriter, PrepError, Staging, aligned_table, batched, file_stamp, previous_stats
from .inputs import wrong_kind
from .splits import SplitSpool, check_split_inputs, split_key
from .tokenizer_pool import load_encoder, process_encoder, tokenizer_pool

KIND = PrepKind.SUMMARIZATION
BATCH_PAIRS = 16  # pairs per tokenizer task: sources run to tens of thousands of tokens
REPORTED = 50  # examples of dropped lines kept in stats.json


@dataclass(frozen=True)
class InputLayout:
    """Where a format keeps a pair.

    Attributes:
        id_field: the pair's id (None or absent: ``file:line``).
        source_field, target_field: the document and the summary (None: the user names them).
        tagged: summary sentences are wrapped in ``<S> ... </S>`` (Cohan et al.'s release).
    """

    id_field: str | None
    source_field: str | None
    target_field: str | None
    tagged: bool = False


LAYOUTS = {
    "papers": InputLayout("file", "body", "abstract"),
    "arxiv": InputLayout("article_id", "article_text", "abstract_text", tagged=True),
    "jsonl": InputLayout("id", None, None),
}


@dataclass(frozen=True)
class SummarizationConfig:
    """What ``prep summarization`` reads and how it cuts.

    Attributes:
        input_format: a key of :data:`LAYOUTS`.
        files: split -> input file; empty when ``input`` is split by ``valid_fraction``/``test_fraction``.
        source_field, target_field, id_field: override the format's fields (required for jsonl's source and target).
        max_source_tokens: longest source item, ``<s>`` and ``</s>`` included.
        max_target_tokens: longest target item, ``</s>`` included.
        truncate: cut longer pairs; False makes a longer pair an error.
    """

    input_format: str
    subword: SubwordSpec
    files: dict = field(default_factory=dict)
    input: Path | None = None
    valid_fraction: float = 0.01
    test_fraction: float = 0.01
    source_field: str | None = None
    target_field: str | None = None
    id_field: str | None = None
    max_source_tokens: int = 16384
    max_target_tokens: int = 1024
    truncate: bool = True
    workers: int = 1

    def fields(self) -> tuple[str | None, str | None, str | None]:
        """(id, source, target) field names; None where neither the user nor the format names one."""
        layout = LAYOUTS[self.input_format]
        return (
            self.id_field or layout.id_field,
            self.source_field or layout.source_field,
            self.target_field or layout.target_field,
        )

    def inputs(self) -> dict[str | None, Path]:
        """split -> file; the key is None for the one input that the fractions split."""
        return {None: self.input} if self.input is not None else dict(self.files)


@dataclass(frozen=True)
class Pair:
    """A document and its summary, as read.

    Attributes:
        id: the input's id, or ``file:line``.
        origin: ``file:line``.
        split: the split its file feeds, or None when a hash decides.
        source: the document's text.
        reference: the summary's sentences.
    """

    id: str
    origin: str
    split: str | None
    source: str
    reference: tuple[str, ...]


@dataclass(frozen=True)
class Dropped:
    """A line that gives no pair: bad input, or a pair with an empty side."""

    origin: str
    reason: str
    empty_side: bool = False


Item = Union[Pair, Dropped]


# ---------------------------------------------------------------- reading

_SENTENCE_TAG = re.compile(r"<S>(.*?)</S>", re.S)


def _text_parts(value) -> list[str] | None:
    """A field's non-empty stripped strings, or None when it is neither text nor a list of text."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    return None


def _summary_sentences(value, tagged: bool) -> list[str] | None:
    """The summary's sentences (see the module docstring), or None when it is not text."""
    parts = _text_parts(value)
    if parts is None:
        return None
    if tagged:
        parts = [s.strip() for part in parts for s in (_SENTENCE_TAG.findall(part) or [part])]
    elif isinstance(value, str):
        parts = split_sentences(value)
    return [p for p in parts if p]


def read_pairs(path: Path, split: str | None, cfg: SummarizationConfig) -> Iterator[Item]:
    """Every pair and dropped line of one input file.

    Raises:
        PrepError: the file is of another kind (a PDF); or, once it is read, no line is a
            JSON object with both fields.
    """
    id_field, source_field, target_field = cfg.fields()
    tagged = LAYOUTS[cfg.input_format].tagged
    problem = wrong_kind(path, "JSONL")
    if problem:
        raise PrepError(f"{path}: {problem}")
    with_fields = 0
    first_keys: list[str] | None = None
    first_problem = None
    for origin, record, problem in jsonl_records(path):
        if not problem and not isinstance(record, dict):
            problem = "not a JSON object"
        if problem:
            first_problem = first_problem or f"{origin}: {problem}"
            yield Dropped(origin, problem)
            continue
        if first_keys is None:
            first_keys = list(record)
        missing = [name for name in (source_field, target_field) if name not in record]
        if missing:
            yield Dropped(origin, f"no field {missing[0]!r}")
            continue
        with_fields += 1
        source_parts = _text_parts(record[source_field])
        reference = _summary_sentences(record[target_field], tagged)
        if source_parts is None or reference is None:
            name = source_field if source_parts is None else target_field
            yield Dropped(origin, f"field {name!r} is not text (a string or a list of strings)")
            continue
        pair_id = record.get(id_field) if id_field else None
        empty = [side for side, parts in ((SOURCE, source_parts), (TARGET, reference)) if not parts]
        if empty:
            names = {SOURCE: source_field, TARGET: target_field}
            sides = " and ".join(f"{side} ({names[side]!r})" for side in empty)
            if cfg.input_format == "papers":
                # The report names the paper, and why prep docs found no abstract in it.
                why = record.get("abstract_missing")
                named = f"{pair_id} ({origin})" if pair_id is not None else origin
                yield Dropped(named, f"empty {sides}" + (f": {why}" if isinstance(why, str) else ""), empty_side=True)
            else:
                yield Dropped(origin, f"empty {sides}", empty_side=True)
            continue
        yield Pair(
            str(pair_id) if pair_id is not None else origin,
            origin,
            split,
            " ".join(source_parts),
            tuple(reference),
        )
    if with_fields == 0:
        if first_keys is None:
            raise PrepError(f"{path}: no JSON object in it" + (f" ({first_problem})" if first_problem else ", empty"))
        raise PrepError(
            f"{path}: no line has the fields {source_field!r} and {target_field!r} (the first object has: "
            f"{', '.join(first_keys) or 'nothing'}); name them with --source-field/--target-field"
        )


# ---------------------------------------------------------------- tokenizing (worker side)


def _tokenize(texts: list[tuple[str, str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per (source, target) text pair, their ids (no ``<s>``/``</s>``)."""
    ids = process_encoder().encode([text for pair in texts for text in pair])
    return list(zip(ids[0::2], ids[1::2], strict=True))


# ---------------------------------------------------------------- writing (driver side)


@dataclass
class Truncation:
    """Items cut to a length limit: how many, and how many tokens they lost."""

    count: int = 0
    tokens_cut: int = 0
    max_cut: int = 0

    def add(self, cut: int) -> None:
        self.count += 1
        self.tokens_cut += cut
        self.max_cut = max(self.max_cut, cut)

    def as_dict(self) -> dict:
        return {**asdict(self), "mean_cut": self.tokens_cut / self.count if self.count else 0.0}


@dataclass
class SplitStats:
    """One split as written. Token counts include ``<s>``/``</s>``; ``longest_source`` is before truncation."""

    pairs: int = 0
    source_tokens: int = 0
    target_tokens: int = 0
    longest_source: int = 0
    truncated_sources: Truncation = field(default_factory=Truncation)
    truncated_targets: Truncation = field(default_factory=Truncation)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["truncated_sources"] = self.truncated_sources.as_dict()
        out["truncated_targets"] = self.truncated_targets.as_dict()
        return out


class _PairWriter:
    """The source and target datasets and the references of one split."""

    def __init__(self, directory: Path, split: str, dict_size: int):
        prefix = directory / f"{split}.{SOURCE}-{TARGET}"
        self.source = MmapWriter(Path(f"{prefix}.{SOURCE}"), dict_size)
        self.target = MmapWriter(Path(f"{prefix}.{TARGET}"), dict_size)
        self.references = open(directory / f"{split}.references.jsonl", "w", encoding="utf-8")
        self.stats = SplitStats()

    def add(self, pair: Pair, source: np.ndarray, target: np.ndarray, cfg: SummarizationConfig) -> None:
        """Write one pair; ``source``/``target``: ids without specials, cut here to the limits."""
        st = self.stats
        for side, ids, specials, limit, truncation in (
            (SOURCE, source, 2, cfg.max_source_tokens, st.truncated_sources),
            (TARGET, target, 1, cfg.max_target_tokens, st.truncated_targets),
        ):
            length = len(ids) + specials
            if length > limit:
                if not cfg.truncate:
                    raise PrepError(
                        f"{pair.origin} (id {pair.id!r}): the {side} is {length:,} tokens, over "
                        f"--max-{side}-tokens {limit:,}; raise the limit, or drop --no-truncate to cut it"
                    )
                truncation.add(length - limit)
        kept_source = np.concatenate([[BOS], source[: cfg.max_source_tokens - 2], [EOS]])
        kept_target = np.append(target[: cfg.max_target_tokens - 1], EOS)
        self.source.add(kept_source)
        self.target.add(kept_target)
        self.references.write(json.dumps({"id": pair.id, "reference": "\n".join(pair.reference)}, ensure_ascii=False))
        self.references.write("\n")
        st.pairs += 1
        st.source_tokens += len(kept_source)
        st.target_tokens += len(kept_target)
        st.longest_source = max(st.longest_source, len(source) + 2)

    def finalize(self) -> None:
        self.source.finalize()
        self.target.finalize()
        self.references.close()


def input_manifest(cfg: SummarizationConfig) -> dict:
    """What the output depends on: the input files' sizes and mtimes, and every option."""
    return {
        "input_format": cfg.input_format,
        "files": {split or "input": file_stamp(path) for split, path in cfg.inputs().items()},
        "fractions": [cfg.valid_fraction, cfg.test_fraction] if cfg.input is not None else None,
        "fields": list(cfg.fields()),
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
        "max_source_tokens": cfg.max_source_tokens,
        "max_target_tokens": cfg.max_target_tokens,
        "truncate": cfg.truncate,
    }


def _check_config(cfg: SummarizationConfig) -> None:
    if cfg.input_format not in LAYOUTS:
        raise PrepError(f"--format: {cfg.input_format!r} is not one of {', '.join(LAYOUTS)}")
    _, source_field, target_field = cfg.fields()
    if source_field is None or target_field is None:
        raise PrepError(f"--format {cfg.input_format}: name the fields with --source-field and --target-field")
    check_split_inputs(cfg.files, cfg.input, cfg.valid_fraction, cfg.test_fraction)
    if cfg.max_source_tokens < 3 or cfg.max_target_tokens < 2:
        raise PrepError("--max-source-tokens/--max-target-tokens: need room for one token besides <s>/</s>")
    if cfg.workers < 1:
        raise PrepError(f"--workers: must be >= 1, got {cfg.workers}")


def prepare_summarization(cfg: SummarizationConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    _check_config(cfg)
    # In the parent too, and first: bad tokenizer files fail here, before the manifest stamps
    # them; and workers=1 tokenizes in-process.
    encoder = load_encoder(cfg.subword)  # in the parent too: bad tokenizer files fail here, and workers=1 runs here
    out = Path(out)
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    if cfg.input is None:
        splits = tuple(s for s in SPLITS if s in cfg.files)
    else:
        splits = ("train",) + tuple(s for s in ("valid", "test") if getattr(cfg, f"{s}_fraction") > 0)
    dropped: list[Dropped] = []
    with Staging(out) as staging:
        writers = {split: _PairWriter(staging.dir, split, encoder.dictionary_size) for split in splits}
        dtype = writers["train" if "train" in writers else splits[0]].source.dtype
        # Pairs of one input to split wait on disk until every source is known (the split rule counts them).
        spool = SplitSpool(staging.dir / "pairs.spool") if cfg.input is not None else None
        pool = tokenizer_pool(cfg.workers, cfg.subword)
        read_bar = tqdm(desc="read", unit=" lines", position=0)
        token_bar = tqdm(desc="tokenize", unit=" pairs", position=1)
        try:

            def pairs() -> Iterator[Pair]:
                for split, path in cfg.inputs().items():
                    for item in read_pairs(path, split, cfg):
                        read_bar.update()
                        if isinstance(item, Dropped):
                            dropped.append(item)
                        else:
                            yield item

            # Chunks of batches go to the pool together: results come back in order, and
            # memory holds one chunk of texts however large the input.
            batches = batched(pairs(), BATCH_PAIRS)
            while chunk := list(itertools.islice(batches, 4 * cfg.workers)):
                texts = [[(pair.source, " ".join(pair.reference)) for pair in batch] for batch in chunk]
                for batch, ids in zip(chunk, (pool.imap if pool else map)(_tokenize, texts), strict=True):
                    for pair, (source, target) in zip(batch, ids, strict=True):
                        if spool is None:
                            writers[pair.split].add(pair, source, target, cfg)
                        else:
                            key = split_key(pair.source.encode("utf-8"))
                            spool.add(key, (pair, source.astype(dtype), target.astype(dtype)))
                        token_bar.update()
        finally:
            read_bar.close()
            token_bar.close()
            if pool is not None:
                pool.terminate()
        if spool:
            for split, (pair, source, target) in spool.replay(cfg.valid_fraction, cfg.test_fraction, unit="documents"):
                writers[split].add(pair, source, target, cfg)
        for writer in writers.values():
            writer.finalize()

        for split, writer in writers.items():
            if not writer.stats.pairs:
                where = f"--{split} {cfg.files[split]}" if cfg.input is None else f"--input {cfg.input}"
                first = f"; the first: {dropped[0].origin}: {dropped[0].reason}" if dropped else ""
                raise PrepError(f"{where}: no pair to write (lines dropped: {len(dropped)}{first})")
        for lang in (SOURCE, TARGET):
            encoder.write_dictionary(staging.dir / f"dict.{lang}.txt")
        empty = [d for d in dropped if d.empty_side]
        skipped = [d for d in dropped if not d.empty_side]
        result = {
            "splits": {split: writer.stats.as_dict() for split, writer in writers.items()},
            "limits": {"max_source_tokens": cfg.max_source_tokens, "max_target_tokens": cfg.max_target_tokens},
            "empty_side": {"count": len(empty), "examples": [asdict(d) for d in empty[:REPORTED]]},
            "skipped": {
                "count": len(skipped),
                "by_reason": dict(Counter(d.reason.split(" (", 1)[0] for d in skipped)),
                "examples": [asdict(d) for d in skipped[:REPORTED]],
            },
        }
        staging.publish(KIND, inputs, stats=result, counted=("pairs", "source_tokens"))
    return result


def stats_table(result: dict) -> str:
    """Pairs, tokens and truncation per split, as a text table."""

    def cut(t: dict) -> str:
        return f"{t['count']:,} ({t['tokens_cut']:,}/{t['mean_cut']:,.0f}/{t['max_cut']:,})" if t["count"] else "0"

    rows = [("split", "pairs", "source tokens", "target tokens", "longest source", "sources cut", "targets cut")]
    for split, st in result["splits"].items():
        rows.append(
            (
                split,
                f"{st['pairs']:,}",
                f"{st['source_tokens']:,}",
                f"{st['target_tokens']:,}",
                f"{st['longest_source']:,}",
                cut(st["truncated_sources"]),
                cut(st["truncated_targets"]),
            )
        )
    return aligned_table(rows) + "\n(cut: pairs truncated (tokens cut: total/mean/max); tokens include <s> and </s>)"
