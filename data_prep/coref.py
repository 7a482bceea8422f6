"""OntoNotes coreference (CoNLL-2012) as fairseq datasets (``longformer-fs prep coref``).

Input: CoNLL-2012 ``*_gold_conll`` files (one per split, or a folder searched
recursively), e.g. the release's ``conll-2012/v4/data/train``. A document part is::

    #begin document (bc/cctv/00/cctv_0001); part 000
    bc/cctv/00/cctv_0001  0  0  Hello  UH  (TOP*  -  -  -  Speaker#1  *  (12
    ...                                                                        12)
    <blank line between sentences>
    #end document

with whitespace-separated columns: document, part, word index, word, POS, parse bit,
lemma, frameset, word sense, speaker, named entity, [predicate arguments ...], and the
coreference column last: ``-`` or ``|``-joined pieces ``(12`` (a mention of cluster 12
opens on this word), ``12)`` (closes), ``(12)`` (a one-word mention). Mentions nest and
span several words; a bracket that does not pair up is a :class:`PrepError` naming the
file and line.

The release as the LDC and the task's site ship it:

- It holds three languages, ``{split}/data/{english,chinese,arabic}/annotations/...``;
  ``language`` keeps the files under ``data/<language>/`` (English, the paper's, by
  default; ``all``: every file). A file whose path names no language of the release (a
  folder of one's own) is always kept. The files left out are counted by language.
- Its ``*_gold_skel`` skeletons carry the annotations with the word column a placeholder,
  ``[WORD]``, until the release's ``skeleton2conll.sh`` restores the OntoNotes 5.0 words
  into a ``*_gold_conll`` file beside each. A skeleton given, a ``*_gold_skel`` found
  without its ``*_gold_conll``, or a document whose every word is ``[WORD]`` is an error
  that says to restore the words first.
- Some genres escape sentence-final punctuation as the words ``/.`` and ``/?``; they read
  as ``.`` and ``?``, as the reference preprocessing (``minimize.py`` of Lee et al.'s
  e2e-coref and of Joshi et al.'s coref) reads them. The stats count the replacements.

Each document part is one example. Words are tokenized one by one as they read in
running text (GPT-2 BPE of ``" " + word``), keeping which word each token comes from.
Output layout, one item per document part in every file of a split::

    dict.txt                      the model's dictionary, as given
    {split}.tokens.{bin,idx}      the document's tokens (no <s>/</s>: the task adds them per segment)
    {split}.sentence.{bin,idx}    each token's sentence index
    {split}.speaker.{bin,idx}     each token's speaker, numbered in order of appearance
    {split}.mentions.{bin,idx}    gold mentions as [start, end, cluster, ...]: token spans, ends inclusive,
                                  clusters numbered 1, 2, ...
    {split}.examples.jsonl        {"id", "part", "words", "clusters" (word spans, ends inclusive),
                                   "subtoken_map" (token -> word)}
    stats.json, prep.json         prep.json records splits.<split>.documents

The stats count the documents and tokens and how many documents need more than one
segment of ``max_tokens`` (``<s>`` and ``</s>`` included) in the model; per split, the
words unescaped (``unescaped``: ``{"/.": n, "/?": n}``) and the release's files left out
by ``language`` (``left_out``: ``{"count", "by_reason": {language: files}, "examples"}``,
the first file of each language).
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from longformer_fs.conventions import COREF_FILES, SEGMENT_SPECIALS, PrepKind, segment_count
from longformer_fs.tokenization import SubwordSpec

from .fairseq_dataset import SPLITS, PrepError, SplitFiles, Staging, aligned_table, file_stamp, previous_stats
from .inputs import wrong_kind

KIND = PrepKind.COREF
SUFFIX = "_gold_conll"
SKELETON = "_gold_skel"  # the release's skeleton of a *_gold_conll file, before its words are restored
PLACEHOLDER = "[WORD]"  # a skeleton's word column
RESTORE = "restore the words with the release's skeleton2conll.sh and OntoNotes 5.0 (LDC2013T19) first"
LANGUAGES = ("english", "chinese", "arabic")  # the release's data/<language>/ folders
ALL_LANGUAGES = "all"
# The words some genres of the release escape, and what the reference preprocessing reads.
UNESCAPED = {"/.": ".", "/?": "?"}
MIN_COLUMNS = 12  # document ... named entity, coreference
WORD, SPEAKER = 3, 9  # column indices
_BEGIN = re.compile(r"^#begin document \((.*)\); part (\d+)\s*$")
_PIECE = re.compile(r"^(\()?(\d+)(\))?$")


@dataclass
class CorefDocument:
    """One document part.

    Attributes:
        name, part: the ``#begin document`` line's document and part number.
        words: the words, in order.
        sentences: each word's sentence index.
        speakers: each word's speaker (the speaker column as written).
        clusters: each cluster's mentions, ``(first word, last word)``, in order of
            first mention; clusters in order of their id's first appearance.
    """

    name: str
    part: int
    words: list[str] = field(default_factory=list)
    sentences: list[int] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    clusters: list[list[tuple[int, int]]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.name}#{self.part:03d}"


def release_language(path: Path) -> str | None:
    """The ``<language>`` of a path ``.../data/<language>/...`` of the CoNLL-2012 release
    (the innermost, of :data:`LANGUAGES`), or None when the path names none."""
    parts = Path(path).absolute().parts
    found = None
    for parent, name in itertools.pairwise(parts):
        if parent == "data" and name in LANGUAGES:
            found = name
    return found


@dataclass(frozen=True)
class SplitInput:
    """One split's input files.

    Attributes:
        files: the ``*_gold_conll`` files to read, sorted.
        left_out: language -> the release's files of that language left out, sorted, the
            languages in the order of :data:`LANGUAGES`.
    """

    files: list[Path]
    left_out: dict[str, list[Path]]

    def left_out_record(self) -> dict:
        """``{"count", "by_reason": {language: files}, "examples"}``, the first file of each
        language as an example (``{"origin", "reason"}``)."""
        return {
            "count": sum(map(len, self.left_out.values())),
            "by_reason": {language: len(files) for language, files in self.left_out.items()},
            "examples": [{"origin": str(files[0]), "reason": language} for language, files in self.left_out.items()],
        }


def conll_files(path: Path, option: str, language: str = ALL_LANGUAGES) -> SplitInput:
    """``path`` itself, or every ``*_gold_conll`` file under the folder ``path``, of ``language``.

    Args:
        path: a CoNLL file, or a folder searched recursively.
        option: the command-line option that gave ``path``, for the errors.
        language: one of :data:`LANGUAGES`: the files whose path names another language
            of the release (:func:`release_language`) are left out; ``all``: none is.

    Returns:
        The files to read and those left out. A PrepError when none is left to read, when
        ``path`` is a skeleton (``*_skel``), or when a ``*_gold_skel`` of ``language``
        under ``path`` has no ``*_gold_conll`` beside it (its words were never restored).
    """
    path = Path(path)

    def wanted(file: Path) -> bool:
        return language == ALL_LANGUAGES or release_language(file) in (None, language)

    if path.is_file():
        if path.name.endswith("_skel"):  # *_gold_skel, *_auto_skel
            raise PrepError(f"{option}: {path} is a CoNLL-2012 skeleton, its words still {PLACEHOLDER}; {RESTORE}")
        if not wanted(path):
            other = release_language(path)
            raise PrepError(
                f"{option}: {path} is {other} (under data/{other}/), not {language}; "
                f"pass --language {other} or --language {ALL_LANGUAGES}"
            )
        return SplitInput([path], {})
    if not path.is_dir():
        raise PrepError(f"{option}: {path} not found")
    files, left_out = [], {}
    for file in sorted(p for p in path.rglob(f"*{SUFFIX}") if p.is_file()):
        if wanted(file):
            files.append(file)
        else:
            left_out.setdefault(release_language(file), []).append(file)
    # skeleton2conll.sh writes each restored file beside its skeleton, *_gold_skel -> *_gold_conll,
    # and stops at the first document it cannot restore: a skeleton alone is a document lost.
    unrestored = sorted(
        p
        for p in path.rglob(f"*{SKELETON}")
        if p.is_file() and wanted(p) and not p.with_name(p.name[: -len(SKELETON)] + SUFFIX).is_file()
    )
    if unrestored:
        raise PrepError(
            f"{option}: {len(unrestored):,} *{SKELETON} file(s) under {path} have no *{SUFFIX} beside them "
            f"(the first: {unrestored[0]}); {RESTORE}"
        )
    left_out = {name: left_out[name] for name in LANGUAGES if name in left_out}
    if not files:
        if left_out:
            others = ", ".join(f"{len(v):,} {k}" for k, v in left_out.items())
            raise PrepError(
                f"{option}: {path} holds no {language} *{SUFFIX} file (left out: {others}); "
                f"pass --language {' or '.join(left_out)} or --language {ALL_LANGUAGES}"
            )
        raise PrepError(f"{option}: {path} holds no *{SUFFIX} file")
    return SplitInput(files, left_out)


def read_conll(path: Path) -> list[CorefDocument]:
    """Every document part of one CoNLL-2012 file; a PrepError ``file:line: problem`` if malformed."""
    path = Path(path)
    problem = wrong_kind(path, "CoNLL text")
    if problem:
        raise PrepError(f"{path}: {problem}")
    documents: list[CorefDocument] = []
    doc: CorefDocument | None = None
    open_at: dict[int, list[tuple[int, int]]] = {}  # cluster id -> stack of (word, line) of open mentions
    mentions: dict[int, list[tuple[int, int]]] = {}
    sentence, in_sentence, begin = 0, False, 0

    def error(line: int, message: str) -> PrepError:
        return PrepError(f"{path}:{line}: {message}")

    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            lines = f.read().splitlines()
        except UnicodeDecodeError as err:
            raise PrepError(f"{path}: not UTF-8 text (byte {err.start})") from None
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("#begin document"):
            if doc is not None:
                raise error(number, f"#begin document inside document {doc.id!r} (no #end document before it)")
            match = _BEGIN.match(text)
            if not match:
                raise error(number, f"expected '#begin document (NAME); part NNN', got {text[:80]!r}")
            doc = CorefDocument(match.group(1), int(match.group(2)))
            open_at, mentions, sentence, in_sentence, begin = {}, {}, 0, False, number
        elif text.startswith("#end document"):
            if doc is None:
                raise error(number, "#end document without #begin document")
            unclosed = [(cid, at) for cid, stack in open_at.items() for at in stack]
            if unclosed:
                cid, (_, at) = min(unclosed, key=lambda u: u[1][1])
                raise error(at, f"mention of cluster {cid} opened here is never closed (document {doc.id!r})")
            if not doc.words:
                raise error(number, f"document {doc.id!r} has no words")
            if all(word == PLACEHOLDER for word in doc.words):
                raise error(begin, f"document {doc.id!r} is a skeleton, every word {PLACEHOLDER}; {RESTORE}")
            doc.clusters = [sorted(spans) for spans in mentions.values()]
            documents.append(doc)
            doc = None
        elif not text:
            if in_sentence:
                sentence, in_sentence = sentence + 1, False
        elif text.startswith("#"):
            continue  # other comments
        else:
            if doc is None:
                raise error(number, "a word line outside #begin document / #end document")
            columns = text.split()
            if len(columns) < MIN_COLUMNS:
                raise error(number, f"{len(columns)} columns; a CoNLL-2012 word line has at least {MIN_COLUMNS}")
            word = len(doc.words)
            doc.words.append(columns[WORD])
            doc.speakers.append(columns[SPEAKER])
            doc.sentences.append(sentence)
            in_sentence = True
            coref = columns[-1]
            if coref == "-":
                continue
            for piece in coref.split("|"):
                match = _PIECE.match(piece)
                if not match or not (match.group(1) or match.group(3)):
                    raise error(number, f"bad coreference piece {piece!r} in {coref!r}")
                cid = int(match.group(2))
                if match.group(1) and match.group(3):
                    mentions.setdefault(cid, []).append((word, word))
                elif match.group(1):
                    open_at.setdefault(cid, []).append((word, number))
                    mentions.setdefault(cid, [])  # clusters keep the order their ids first appear in
                else:
                    if not open_at.get(cid):
                        raise error(number, f"{piece!r} closes a mention of cluster {cid} that was never opened")
                    start, _ = open_at[cid].pop()
                    mentions.setdefault(cid, []).append((start, word))
    if doc is not None:
        raise error(len(lines), f"document {doc.id!r} has no #end document")
    return documents


def unescape_words(doc: CorefDocument) -> Counter:
    """Replace the escaped words of :data:`UNESCAPED` in ``doc.words``; returns how many of
    each were replaced."""
    replaced: Counter = Counter()
    for i, word in enumerate(doc.words):
        if word in UNESCAPED:
            doc.words[i] = UNESCAPED[word]
            replaced[word] += 1
    return replaced


@dataclass
class TokenizedDocument:
    """A document's model input: ``tokens`` and, per token, its word, sentence and speaker
    ids; ``mentions`` ``(M, 3)`` as ``[start token, end token, cluster]`` (clusters 1, 2, ...)."""

    tokens: np.ndarray
    subtoken_map: np.ndarray
    sentence: np.ndarray
    speaker: np.ndarray
    mentions: np.ndarray


def tokenize_document(doc: CorefDocument, encoder) -> TokenizedDocument:
    """Each word as GPT-2 BPE of ``" " + word`` (as in running text), the clusters mapped
    from word spans to token spans (first token of the first word, last of the last)."""
    pieces = encoder.encode([" " + w for w in doc.words]) if doc.words else []
    counts = np.array([len(p) for p in pieces], dtype=np.int64)
    tokens = np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)
    subtoken_map = np.repeat(np.arange(len(doc.words)), counts)
    last = np.cumsum(counts) - 1
    first = last - counts + 1
    speaker_ids = {name: i for i, name in enumerate(dict.fromkeys(doc.speakers))}
    mentions = [(first[s], last[e], cluster) for cluster, spans in enumerate(doc.clusters, 1) for s, e in spans]
    return TokenizedDocument(
        tokens,
        subtoken_map,
        np.asarray(doc.sentences, dtype=np.int64)[subtoken_map],
        np.asarray([speaker_ids[s] for s in doc.speakers], dtype=np.int64)[subtoken_map],
        np.asarray(mentions, dtype=np.int64).reshape(-1, 3),
    )


@dataclass(frozen=True)
class CorefConfig:
    """What ``prep coref`` reads: ``files`` split -> a ``*_gold_conll`` file or a folder of
    them; ``language`` the release's language kept (:func:`conll_files`); ``max_tokens``
    the model's length (segments, for the stats)."""

    subword: SubwordSpec
    files: dict
    language: str = "english"
    max_tokens: int = 4096


def input_manifest(cfg: CorefConfig, inputs: dict[str, SplitInput]) -> dict:
    """What a rerun compares: the files read (:func:`file_stamp`), how many the language
    left out, and the settings."""
    return {
        "files": {split: [file_stamp(p) for p in split_input.files] for split, split_input in inputs.items()},
        "language": cfg.language,
        "left_out": {split: split_input.left_out_record()["by_reason"] for split, split_input in inputs.items()},
        "max_tokens": cfg.max_tokens,
        "subword": {"kind": cfg.subword.kind, "files": [file_stamp(p) for p in cfg.subword.input_files()]},
    }


def _check_config(cfg: CorefConfig) -> dict[str, SplitInput]:
    """The files of each split, in split order; a PrepError for a setting that cannot work."""
    if not cfg.files:
        raise PrepError("give at least one of --train, --valid, --test")
    for split in cfg.files:
        if split not in SPLITS:
            raise PrepError(f"splits: {split!r} is not one of {', '.join(SPLITS)}")
    if cfg.language not in (*LANGUAGES, ALL_LANGUAGES):
        raise PrepError(f"--language: {cfg.language!r} is not one of {', '.join((*LANGUAGES, ALL_LANGUAGES))}")
    if cfg.max_tokens <= SEGMENT_SPECIALS:
        raise PrepError(f"--max-tokens: must be more than {SEGMENT_SPECIALS}, got {cfg.max_tokens}")
    return {split: conll_files(cfg.files[split], f"--{split}", cfg.language) for split in SPLITS if split in cfg.files}


def prepare_coref(cfg: CorefConfig, out: Path, force: bool = False, log=print) -> dict:
    """Build the dataset in ``out``; returns the stats (also in ``out/stats.json``)."""
    split_inputs = _check_config(cfg)
    out = Path(out)
    encoder = cfg.subword.load()  # first: missing tokenizer files are reported by name
    inputs = json.loads(json.dumps(input_manifest(cfg, split_inputs)))
    if (previous := previous_stats(out, KIND, inputs, force, log)) is not None:
        return previous

    data, unescaped = {}, {}
    for split, split_input in split_inputs.items():
        data[split] = [d for p in split_input.files for d in read_conll(p)]
        if not data[split]:
            raise PrepError(f"--{split}: {cfg.files[split]} holds no document")
        replaced = sum((unescape_words(doc) for doc in data[split]), Counter())
        unescaped[split] = {word: replaced[word] for word in UNESCAPED}
    stats = {}
    with (
        Staging(out) as staging,
        tqdm(total=sum(len(v) for v in data.values()), desc="tokenize+write", unit=" documents") as bar,
    ):
        encoder.write_dictionary(staging.dir / "dict.txt")
        for split, documents in data.items():
            stats[split] = _write_split(staging.dir, split, documents, encoder, cfg.max_tokens, bar)
            stats[split]["unescaped"] = unescaped[split]
            stats[split]["left_out"] = split_inputs[split].left_out_record()
        result = {"max_tokens": cfg.max_tokens, "language": cfg.language, "splits": stats}
        staging.publish(KIND, inputs, stats=result, counted=("documents",))
    return result


def _write_split(directory: Path, split: str, documents: list[CorefDocument], encoder, max_tokens: int, bar) -> dict:
    """Tokenize and write one split's files; returns its stats."""
    fields = {"tokens": encoder.dictionary_size, **{name: SplitFiles.SIGNED for name in COREF_FILES[1:]}}
    segments, mention_count, cluster_count = [], 0, 0
    with SplitFiles(directory, split, fields) as files:
        for doc in documents:
            tokenized = tokenize_document(doc, encoder)
            row = {
                "id": doc.name,
                "part": doc.part,
                "words": doc.words,
                "clusters": [[list(span) for span in spans] for spans in doc.clusters],
                "subtoken_map": tokenized.subtoken_map.tolist(),
            }
            files.add(
                row,
                len(tokenized.tokens),
                tokens=tokenized.tokens,
                sentence=tokenized.sentence,
                speaker=tokenized.speaker,
                mentions=tokenized.mentions.reshape(-1),
            )
            segments.append(segment_count(len(tokenized.tokens), max_tokens))
            mention_count += len(tokenized.mentions)
            cluster_count += len(doc.clusters)
            bar.update(1)
    return {
        "documents": len(documents),
        "tokens": sum(files.lengths),
        **files.length_stats(),
        "multi_segment": int(sum(s > 1 for s in segments)),
        "mentions": mention_count,
        "clusters": cluster_count,
    }


def stats_table(result: dict) -> str:
    """One row per split: documents, tokens, how many need more than one segment, mentions."""
    more = f"> 1 segment of {result['max_tokens']}"
    rows = [("split", "documents", "tokens", *SplitFiles.LENGTH_HEADERS, more, "mentions", "clusters")]
    for split, st in result["splits"].items():
        rows.append(
            (
                split,
                f"{st['documents']:,}",
                f"{st['tokens']:,}",
                *SplitFiles.length_cells(st),
                f"{st['multi_segment']:,}",
                f"{st['mentions']:,}",
                f"{st['clusters']:,}",
            )
        )
    return aligned_table(rows)
