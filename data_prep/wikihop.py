"""WikiHop multiple-choice QA as fairseq datasets (``longformer-fs prep wikihop``).

Input: WikiHop's JSON, a list of ``{"id", "query", "answer", "candidates": [...],
"supports": [...]}``. The query ``"country_of_citizenship thomas of brotherton"`` is a
relation and an entity; the question written is the relation with its underscores as
spaces, then the entity (``"country of citizenship thomas of brotherton"``).

The model input of an example is::

    <s> [q] question [/q] [ent] c1 [/ent] [ent] c2 [/ent] ... </s> support1 </s> support2 </s> ...

where ``[q] [/q] [ent] [/ent]`` (:data:`WIKIHOP_SYMBOLS`) are four symbols the model's
dictionary does not have: ``dict.txt`` is the model's with those missing appended, in that
order, with count 1 (symbols already there keep their ids). The model's embeddings must be
extended to match (``convert-roberta --add-tokens``). Note that a symbol a task adds after
loading ``dict.txt`` (fairseq's ``<mask>``) now comes after the four.

Output layout, one item per example in every file of a split::

    dict.txt                       the model's dictionary + WIKIHOP_SYMBOLS
    {split}.prefix.{bin,idx}       <s> [q] question [/q] [ent] c1 [/ent] ... (all before the first </s>)
    {split}.context.{bin,idx}      </s> support1 </s> support2 </s> ... </s> (the rest)
    {split}.label.{bin,idx}        [index of the answer among the candidates]
    {split}.examples.jsonl         {"id", "candidates", "answer"}
    stats.json, prep.json

The splits are given files, or one input that :func:`~.splits.assign_splits` cuts by
the examples' ids (valid and test get their fractions, at least one example each).

Question, candidates and supports are tokenized each on its own, as written. A context
longer than the model can take is run in chunks that each repeat the prefix (the task's
business); the stats count the examples longer than ``max_tokens`` and how many chunks of
``max_tokens - len(prefix)`` context tokens each needs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import (
    NUM_SPECIALS,
    WIKIHOP_SYMBOLS,
    PrepKind,
    wikihop_context,
    wikihop_pieces,
    wikihop_prefix,
    wikihop_question,
)
from longformer_fs.tokenization import SubwordSpec

from .fairseq_dataset import SPLITS, PrepError, SplitFiles, Staging, aligned_table, batched, file_stamp, previous_stats
from .inputs import load_json
from .splits import FRACTIONS_REMEDY, assign_splits, check_split_inputs, split_key

KIND = PrepKind.WIKIHOP
BATCH_EXAMPLES = 16  # examples per tokenizer call


@dataclass(frozen=True)
class WikihopExample:
    """One entry, checked.

    Attributes:
        question: the query as text (relation with spaces, then the entity).
        label: the answer's index in ``candidates``.
    """

    id: str
    question: str
    candidates: tuple[str, ...]
    answer: str
    supports: tuple[str, ...]
    label: int


def read_wikihop(path: Path) -> list[WikihopExample]:
    """Every entry of a WikiHop JSON file, checked; a PrepError naming the bad entry if not."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list):
        raise PrepError(f"{path}: expected a JSON list of examples, got {type(data).__name__}")
    examples, seen = [], set()
    for i, entry in enumerate(data):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict):
            raise PrepError(f"{where}: expected a JSON object, got {type(entry).__name__}")
        missing = [key for key in ("id", "query", "answer", "candidates", "supports") if key not in entry]
        if missing:
            raise PrepError(f"{where}: no {', '.join(repr(k) for k in missing)} key")
        where = f"{where} (id {entry['id']!r})"
        for key in ("id", "query", "answer"):
            if not isinstance(entry[key], str):
                raise PrepError(f"{where}: {key!r} is {type(entry[key]).__name__}, expected a string")
        for key in ("candidates", "supports"):
            values = entry[key]
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise PrepError(f"{where}: {key!r} must be a list of strings")
        if not entry["candidates"]:
            raise PrepError(f"{where}: no candidates")
        if entry["answer"] not in entry["candidates"]:
            raise PrepError(
                f"{where}: answer {entry['answer']!r} is not among its {len(entry['candidates'])} candidates"
            )
        if entry["id"] in seen:
            raise PrepError(f"{where}: id {entry['id']!r} occurs twice")
        seen.add(entry["id"])
        examples.append(
            WikihopExample(
                entry["id"],
                wikihop_question(entry["query"]),
                tuple(entry["candidates"]),
                entry["answer"],
                tuple(entry["supports"]),
                entry["candidates"].index(entry["answer"]),
            )
        )
    return examples


def _dictionary_symbols(path: Path) -> list[str]:
    """The symbols of a fairseq ``dict.txt``, in order (``SYMBOL COUNT [#fairseq:overwrite]``)."""
    symbols = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        symbol, _, field = line.rstrip().rpartition(" ")
        if field == "#fairseq:overwrite":
            symbol = symbol.rpartition(" ")[0]
        symbols.append(symbol)
    return symbols


def extend_dictionary(path: Path, symbols: tuple[str, ...] = WIKIHOP_SYMBOLS) -> tuple[dict[str, int], int]:
    """Append the ``symbols`` (a task's markers) missing from ``dict.txt`` at ``path``.

    Returns:
        Each symbol's model id, and the dictionary's size (fairseq's specials included).
    """
    added, symbols = symbols, _dictionary_symbols(path)
    missing = [s for s in added if s not in symbols]
    if missing:
        text = Path(path).read_text(encoding="utf-8")
        if text and not text.endswith("\n"):
            text += "\n"
        Path(path).write_text(text + "".join(f"{s} 1\n" for s in missing), encoding="utf-8")
        symbols += missing
    index = {symbol: NUM_SPECIALS + i for i, symbol in enumerate(symbols)}
    return {s: index[s] for s in added}, NUM_SPECIALS + len(symbols)


@dataclass(frozen=True)
class WikihopConfig:
    """What ``prep wikihop`` reads.

    Attributes:
        files: split -> WikiHop JSON; empty when ``input`` is split.
        input: one WikiHop JSON to split by ``valid_fraction``/``test_fraction``.
        max_tokens: the model's length, for the stats.
    """

    subword: SubwordSpec
    files: dict
    max_tokens: int = 4096
    input: Path | None = None
    valid_fraction: float = 0.1
    test_fraction: float = 0.1


def input_manifest(cfg: WikihopConfig) -> dict:
    return {
        "files": {split: file_stamp(path) for split, path in cfg.files.items()},
        "input": file_stamp(cfg.input) if cfg.input is not None else None,
        "fractions": [cfg.valid_fraction, cfg.test_fraction] if cfg.input is not None else None,
        "max_tokens": cfg.max_tokens,
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
    }


def check_config(cfg: WikihopConfig) -> None:
    """PrepError for inputs and options this preparation (or prep hotpotqa, alike) cannot take."""
    check_split_inputs(cfg.files, cfg.input, cfg.valid_fraction, cfg.test_fraction)
    if cfg.max_tokens < 2:
        raise PrepError(f"--max-tokens: must be at least 2, got {cfg.max_tokens}")


def read_splits(cfg: WikihopConfig, reader=read_wikihop) -> dict[str, list]:
    """The examples of each split: those of its file, or of ``input`` as the split rule places them by id.

    ``reader`` reads one file into examples with an ``id`` (``prep hotpotqa`` passes its own)."""
    given = {"input": cfg.input} if cfg.input is not None else {s: cfg.files[s] for s in SPLITS if s in cfg.files}
    read = {name: reader(path) for name, path in given.items()}
    for name, examples in read.items():
        if not examples:
            raise PrepError(f"--{name}: {given[name]} holds no example")
    if cfg.input is None:
        return read
    examples = read["input"]
    splits = assign_splits(
        [split_key(ex.id.encode("utf-8")) for ex in examples],
        cfg.valid_fraction,
        cfg.test_fraction,
        unit="examples",
        remedy=FRACTIONS_REMEDY,
    )
    return {
        split: [ex for ex, s in zip(examples, splits, strict=True) if SPLITS[s] == split]
        for split in SPLITS
        if split == "train" or getattr(cfg, f"{split}_fraction") > 0
    }


def prepare_wikihop(cfg: WikihopConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    check_config(cfg)
    out = Path(out)
    encoder = cfg.subword.load()  # first: missing tokenizer files are reported by name
    inputs = json.loads(json.dumps(input_manifest(cfg)))  # as the manifest will hold it
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    return write_examples(out, KIND, inputs, cfg, read_splits(cfg), encoder, WIKIHOP_SYMBOLS, _write_split)


def write_examples(out, kind, inputs, cfg, data, encoder, symbols, write_split) -> dict:
    """Stage, write and publish a preparation of examples whose dictionary gains ``symbols``
    (WikiHop's, HotpotQA's): ``dict.txt`` with them appended, then each split of ``data``
    (``{split: examples}``) by ``write_split(directory, split, examples, source file,
    encoder, symbol ids, dictionary size, cfg.max_tokens, progress bar)``, which returns the
    split's stats with its ``examples`` count. Returns the preparation's stats."""
    stats = {}
    with (
        Staging(out) as staging,
        tqdm(total=sum(len(v) for v in data.values()), desc="tokenize+write", unit=" examples") as bar,
    ):
        encoder.write_dictionary(staging.dir / "dict.txt")
        symbol_ids, dictionary_size = extend_dictionary(staging.dir / "dict.txt", symbols)
        for split, examples in data.items():
            source = cfg.files.get(split, cfg.input)
            stats[split] = write_split(
                staging.dir, split, examples, source, encoder, symbol_ids, dictionary_size, cfg.max_tokens, bar
            )
        result = {"max_tokens": cfg.max_tokens, "symbols": symbol_ids, "splits": stats}
        staging.publish(kind, inputs, stats=result, counted=("examples",))
    return result


def _write_split(
    directory: Path,
    split: str,
    examples: list[WikihopExample],
    source: Path,
    encoder,
    symbol_ids: dict[str, int],
    dictionary_size: int,
    max_tokens: int,
    bar,
) -> dict:
    """Tokenize and write one split's files; returns its stats."""
    labels = max((len(ex.candidates) for ex in examples), default=1)
    fields = {"prefix": dictionary_size, "context": dictionary_size, "label": labels}
    prefixes, chunks = [], Counter()
    with SplitFiles(directory, split, fields) as files:
        for batch in batched(examples, BATCH_EXAMPLES):
            texts = [t for ex in batch for t in wikihop_pieces(ex.question, ex.candidates, ex.supports)]
            encoded = iter(encoder.encode(texts))
            for ex in batch:
                question = next(encoded)
                candidates = [next(encoded) for _ in ex.candidates]
                supports = [next(encoded) for _ in ex.supports]
                prefix = wikihop_prefix(question, candidates, symbol_ids)
                context = wikihop_context(supports)
                room = max_tokens - len(prefix)
                if room < 1:
                    raise PrepError(
                        f"{source}: example {ex.id!r}: question and candidates take {len(prefix)} "
                        f"tokens, leaving no room for the context in --max-tokens {max_tokens}"
                    )
                row = {"id": ex.id, "candidates": list(ex.candidates), "answer": ex.answer}
                files.add(row, len(prefix) + len(context), prefix=prefix, context=context, label=np.array([ex.label]))
                prefixes.append(len(prefix))
                chunks[-(-len(context) // room)] += 1
            bar.update(len(batch))
    return {
        "examples": len(examples),
        **files.length_stats(),
        "max_prefix_tokens": max(prefixes, default=0),
        "over_max_tokens": sum(n > max_tokens for n in files.lengths),
        "chunks": {str(k): chunks[k] for k in sorted(chunks)},
    }


def stats_table(result: dict) -> str:
    """One row per split: examples, lengths, how many exceed the model and their chunk counts."""
    rows = [("split", "examples", *SplitFiles.LENGTH_HEADERS, f"> {result['max_tokens']}", "chunks: examples")]
    for split, st in result["splits"].items():
        rows.append(
            (
                split,
                f"{st['examples']:,}",
                *SplitFiles.length_cells(st),
                f"{st['over_max_tokens']:,}",
                " ".join(f"{k}:{n}" for k, n in st["chunks"].items()),
            )
        )
    return aligned_table(rows, left=(0, 5))
