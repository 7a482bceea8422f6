"""RoBERTa-family tokenizers as HF ships them, read, with the files ``prep`` takes.

HF ships a byte-level BPE as ``tokenizer.json`` (vocabulary and merges in one file), as
``vocab.json`` + ``merges.txt``, or both; its ids are the model's. ``prep`` takes GPT-2's
``encoder.json`` (BPE piece -> GPT-2 id) and ``vocab.bpe`` (the merges) with the model's
``dict.txt``, whose line ``r`` holds the GPT-2 id of model id ``NUM_SPECIALS + r``
(:func:`longformer_fs.conventions.dictionary_lookup`).

Going from HF to ``prep``'s files needs each piece's GPT-2 id, which HF's files no longer
hold (:mod:`.gpt2_numbering`): the files written for a released RoBERTa, Longformer, BART
or LED are then GPT-2's own ``encoder.json`` and ``vocab.bpe``, with a ``dict.txt`` of
RoBERTa's symbols (:mod:`.token_ids`), and the ids ``prep`` gives are HF's
(``tests/conversion`` checks both on English text).

XLM-R's family ships a SentencePiece model instead (``sentencepiece.bpe.model``, beside a
Unigram ``tokenizer.json``): :class:`SentencePieceVocab`. Its ids are fairseq's
``<s> <pad> </s> <unk>``, then the model's pieces after its own ``<unk> <s> </s>`` (model id
= piece id + 1), then ``<mask>``; ``prep --spm`` reads the model file as it is, with the
``dict.txt`` of those pieces, and gives HF's ids (``tests/data_prep/test_spm_multilingual.py``).

The other direction, a tokenizer for a model's ids written, is :mod:`.tokenizer_out`.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..conventions import BOS, EOS, MASK, NUM_SPECIALS, SENTENCEPIECE_MODEL, SPECIAL_SYMBOLS, BpeError
from ..tokenization import SentencePieceEncoder
from .gpt2_numbering import gpt2_ids

TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT = "tokenizer.json", "vocab.json", "merges.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
ENCODER_JSON, VOCAB_BPE = "encoder.json", "vocab.bpe"
SENTENCEPIECE_OWN = ("<unk>", "<s>", "</s>")  # ids 0 to 2 of XLM-R's SentencePiece model


class TokenizerError(ValueError):
    """The tokenizer files are missing, unreadable or not the model's; the message names the file."""


@dataclass
class ByteLevelBPE:
    """A byte-level BPE as HF saves it.

    Attributes:
        vocab: every token, specials included -> its (model) id.
        merges: the merge rules, in order.
        files: where it was read from (for messages).
    """

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    files: list[Path]

    @property
    def where(self) -> str:
        return " and ".join(str(f) for f in self.files)

    def size(self) -> int:
        """Ids the tokenizer can give: its largest + 1."""
        return max(self.vocab.values()) + 1

    def write_prep_files(self, out_dir: Path) -> list[Path]:
        """``encoder.json`` and ``vocab.bpe`` in GPT-2's numbering (:func:`gpt2_ids`), as
        ``prep`` takes them, in ``out_dir``; their paths."""
        out_dir = Path(out_dir)
        encoder = dict(sorted(gpt2_ids(self.vocab, self.merges).items(), key=lambda item: item[1]))
        (out_dir / ENCODER_JSON).write_text(json.dumps(encoder, ensure_ascii=False), encoding="utf-8")
        merges = "".join(f"{left} {right}\n" for left, right in self.merges)
        (out_dir / VOCAB_BPE).write_text("#version: 0.2\n" + merges, encoding="utf-8")
        return [out_dir / ENCODER_JSON, out_dir / VOCAB_BPE]


# How HF numbers a SentencePiece model's pieces (model id = piece id + offset). XLM-R's
# layout is fairseq's dictionary: its <s> <pad> </s> <unk>, then the pieces after the
# model's own <unk> <s> </s>. CamemBERT's puts four ids before every piece, the model's own
# three included, so HF's <s> and </s> are 5 and 6.
SENTENCEPIECE_OFFSET = {"xlm-roberta": 1, "camembert": NUM_SPECIALS}
NOT_USED = "NOTUSED"  # CamemBERT's suffix for the ids that fairseq's dictionary holds twice
CAMEMBERT_BOS_EOS = (SENTENCEPIECE_OFFSET["camembert"] + 1, SENTENCEPIECE_OFFSET["camembert"] + 2)


@dataclass
class SentencePieceVocab:
    """A SentencePiece model with the ids of an HF tokenizer over it (XLM-R's or CamemBERT's).

    Attributes:
        model: the ``.model`` file.
        symbols: ``dict.txt``'s lines, model ids ``NUM_SPECIALS`` onwards: the pieces after
            the model's own ``<unk> <s> </s>``; in CamemBERT's layout those three first, as
            ``<unk>NOTUSED <s>NOTUSED </s>NOTUSED`` (prep never gives them).
        files: where it was read from (for messages).
        layout: ``xlm-roberta`` or ``camembert`` (:data:`SENTENCEPIECE_OFFSET`).
        data: the model file's bytes, where it was rebuilt from a ``tokenizer.json``
            (:func:`read_unigram_json`; ``model`` is then that file).
    """

    model: Path
    symbols: list[str]
    files: list[Path]
    layout: str = "xlm-roberta"
    data: bytes | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return " and ".join(str(f) for f in self.files)

    @property
    def hf_bos_eos(self) -> tuple[int, int]:
        """The ids HF's tokenizer gives ``<s>`` and ``</s>``; fairseq's are 0 and 2."""
        return CAMEMBERT_BOS_EOS if self.layout == "camembert" else (BOS, EOS)

    def size(self) -> int:
        """Ids the tokenizer can give, ``<mask>`` included."""
        return NUM_SPECIALS + len(self.symbols) + 1

    def write_prep_files(self, out_dir: Path) -> list[Path]:
        """The model file, as ``prep --spm`` takes it, in ``out_dir``; its path."""
        target = Path(out_dir) / SENTENCEPIECE_MODEL
        if self.data is not None:
            target.write_bytes(self.data)
        else:
            shutil.copyfile(self.model, target)
        return [target]


def sentencepiece_layout(directory: Path, tokenizer_json: dict | None = None) -> str:
    """Which HF numbering a tokenizer directory gives its SentencePiece model:
    ``tokenizer_config.json``'s class, else ``tokenizer.json``'s first id (``tokenizer_json``:
    that file, parsed, where the caller has it), else XLM-R's."""
    directory = Path(directory)
    if (directory / TOKENIZER_CONFIG).is_file():
        name = str(read_json(directory / TOKENIZER_CONFIG).get("tokenizer_class") or "")
        if name.startswith("Camembert"):
            return "camembert"
        if name.startswith("XLMRoberta"):
            return "xlm-roberta"
    if tokenizer_json is None and (directory / TOKENIZER_JSON).is_file():
        tokenizer_json = read_json(directory / TOKENIZER_JSON)
    if tokenizer_json is not None:
        model = tokenizer_json.get("model") or {}
        if [entry[0] for entry in (model.get("vocab") or [])[:1]] == [SPECIAL_SYMBOLS[0] + NOT_USED]:
            return "camembert"
    return "xlm-roberta"


def read_sentencepiece(directory: Path, hf_ids: bool = True, layout: str | None = None) -> SentencePieceVocab:
    """``sentencepiece.bpe.model``, checked against a ``tokenizer.json`` beside it.

    Args:
        hf_ids: the model's ids are to follow from the pieces, as HF's XLM-R and CamemBERT
            tokenizers number them (checked). False for a fairseq release, whose
            ``dict.txt`` gives its ids.
        layout: which of the two; by default what the directory's files say
            (:func:`sentencepiece_layout`).
    """
    path = directory / SENTENCEPIECE_MODEL
    try:
        encoder = SentencePieceEncoder(path)  # its symbols are what prep lists without a dict.txt
    except BpeError as err:
        raise TokenizerError(str(err).removeprefix("--spm: ")) from None
    if not hf_ids:
        return SentencePieceVocab(path, encoder.symbols, [path])
    pieces = [encoder.processor.id_to_piece(i) for i in range(encoder.processor.get_piece_size())]
    if tuple(pieces[:3]) != SENTENCEPIECE_OWN or encoder.symbols != pieces[3:]:
        raise TokenizerError(
            f"{path}: pieces {pieces[:3]} first; XLM-R's and CamemBERT's layouts, which fairseq's dictionary "
            f"follows, have {' '.join(SENTENCEPIECE_OWN)} as ids 0 to 2 and no other control piece"
        )
    tokenizer_json = read_json(directory / TOKENIZER_JSON) if (directory / TOKENIZER_JSON).is_file() else None
    layout = layout or sentencepiece_layout(directory, tokenizer_json)
    own = [piece + NOT_USED for piece in pieces[:3]] if layout == "camembert" else []
    vocab = SentencePieceVocab(path, own + pieces[3:], [path], layout)
    if tokenizer_json is not None:
        model = tokenizer_json.get("model") or {}
        listed = [entry[0] for entry in model.get("vocab") or []]
        first = SENTENCEPIECE_OFFSET[layout] + 3  # HF's id of the first piece after the model's own three
        if model.get("type") != "Unigram" or listed[first : first + len(pieces) - 3] != pieces[3:]:
            raise TokenizerError(f"{directory / TOKENIZER_JSON} and {path} disagree; which is the model's tokenizer?")
        vocab.files.append(directory / TOKENIZER_JSON)
    return vocab


def read_unigram_json(directory: Path, data: dict) -> SentencePieceVocab:
    """A SentencePiece tokenizer given as HF's Unigram ``tokenizer.json`` alone: the model
    it was made from, rebuilt (its pieces and scores, XLM-R's control pieces, and the
    normalizer's precompiled character map), for ``prep`` to read. ``data``: the
    ``tokenizer.json``, parsed.

    Raises:
        TokenizerError: a Unigram model without SentencePiece's normalizer, or pieces that
            are not laid out as XLM-R's or CamemBERT's.
    """
    from sentencepiece import sentencepiece_model_pb2 as spm_pb

    path = Path(directory) / TOKENIZER_JSON
    charsmap = _precompiled_charsmap(data.get("normalizer"))
    if charsmap is None:
        raise TokenizerError(
            f"{path}: a Unigram tokenizer without SentencePiece's normalizer (Precompiled), so not a "
            f"SentencePiece model's; give the directory that holds its {SENTENCEPIECE_MODEL} with --tokenizer"
        )
    layout = sentencepiece_layout(directory, data)
    listed = [(entry[0], float(entry[1])) for entry in data["model"].get("vocab") or []]
    first = SENTENCEPIECE_OFFSET[layout] + 3  # HF's id of the first piece after the model's own three
    expected = list(SPECIAL_SYMBOLS)
    if layout == "camembert":  # fairseq's ids, two of them NOTUSED, then the model's own three
        expected = [s + NOT_USED if s in (SPECIAL_SYMBOLS[0], SPECIAL_SYMBOLS[2]) else s for s in expected]
        expected += [SENTENCEPIECE_OWN[0] + NOT_USED, *SENTENCEPIECE_OWN[1:]]
    if [piece for piece, _ in listed[:first]] != expected:
        raise TokenizerError(
            f"{path}: its first ids are {[piece for piece, _ in listed[:first]]}; {layout}'s layout has {expected}"
        )
    pieces = listed[first:-1] if listed and listed[-1][0] == MASK else listed[first:]
    proto = spm_pb.ModelProto()
    proto.trainer_spec.model_type = spm_pb.TrainerSpec.UNIGRAM
    proto.trainer_spec.vocab_size = len(pieces) + 3
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, 1, 2
    proto.trainer_spec.pad_id = -1
    proto.normalizer_spec.name = "nmt_nfkc"
    proto.normalizer_spec.precompiled_charsmap = charsmap
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = True
    proto.normalizer_spec.escape_whitespaces = True
    kinds = (spm_pb.ModelProto.SentencePiece.UNKNOWN, *(spm_pb.ModelProto.SentencePiece.CONTROL,) * 2)
    for piece, kind in zip(SENTENCEPIECE_OWN, kinds, strict=True):
        proto.pieces.add(piece=piece, score=0.0, type=kind)
    for piece, score in pieces:
        proto.pieces.add(piece=piece, score=score, type=spm_pb.ModelProto.SentencePiece.NORMAL)
    model = proto.SerializeToString()
    with tempfile.TemporaryDirectory() as rebuilt:  # checked as a model file is, then kept as bytes
        (Path(rebuilt) / SENTENCEPIECE_MODEL).write_bytes(model)
        vocab = read_sentencepiece(Path(rebuilt), layout=layout)
    return SentencePieceVocab(path, vocab.symbols, [path], layout, model)


def _precompiled_charsmap(normalizer: dict | None) -> bytes | None:
    """The character map of a tokenizer.json normalizer's Precompiled step (also inside a Sequence)."""
    if not normalizer:
        return None
    if normalizer.get("type") == "Precompiled":
        return base64.b64decode(normalizer.get("precompiled_charsmap") or "")
    return next(filter(None, map(_precompiled_charsmap, normalizer.get("normalizers") or [])), None)


def _merge_pairs(merges: list, where: Path) -> list[tuple[str, str]]:
    pairs = []
    for merge in merges:
        pair = merge.split(" ") if isinstance(merge, str) else list(merge)
        if len(pair) != 2:
            raise TokenizerError(f"{where}: merge {merge!r} is not a pair of pieces")
        pairs.append((pair[0], pair[1]))
    return pairs


def read_json(path: Path):
    """A tokenizer's JSON file, or :class:`TokenizerError` naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TokenizerError(f"{path}: not JSON ({err})") from None


def _byte_level(pre_tokenizer: dict | None) -> dict | None:
    """The ByteLevel step of a tokenizer.json pre-tokenizer (also inside a Sequence)."""
    if not pre_tokenizer:
        return None
    if pre_tokenizer.get("type") == "ByteLevel":
        return pre_tokenizer
    return next(filter(None, map(_byte_level, pre_tokenizer.get("pretokenizers") or [])), None)


def _read_tokenizer_json(path: Path, data: dict) -> ByteLevelBPE:
    """The byte-level BPE of ``tokenizer.json`` at ``path``, parsed as ``data``."""
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise TokenizerError(
            f"{path}: a {model.get('type')} tokenizer; RoBERTa-family models use a byte-level BPE or XLM-R's "
            "SentencePiece"
        )
    byte_level = _byte_level(data.get("pre_tokenizer"))
    if byte_level is None:
        raise TokenizerError(f"{path}: its BPE is not byte-level (no ByteLevel pre-tokenizer), unlike RoBERTa's")
    if byte_level.get("add_prefix_space") or byte_level.get("use_regex") is False:
        raise TokenizerError(
            f"{path}: byte-level BPE with add_prefix_space or without GPT-2's split; prep encodes as RoBERTa does "
            "(no prefix space, GPT-2's split)"
        )
    if data.get("normalizer"):
        raise TokenizerError(f"{path}: normalizer {data['normalizer'].get('type')}; prep encodes text as it is")
    vocab = dict(model.get("vocab") or {})
    for added in data.get("added_tokens") or []:
        vocab.setdefault(added["content"], added["id"])
    return ByteLevelBPE(vocab, _merge_pairs(model.get("merges") or [], path), [path])


def _read_vocab_merges(directory: Path) -> ByteLevelBPE:
    vocab_path, merges_path = directory / VOCAB_JSON, directory / MERGES_TXT
    vocab = read_json(vocab_path)
    if not isinstance(vocab, dict):
        raise TokenizerError(f"{vocab_path}: not a JSON object of token -> id")
    try:
        lines = merges_path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise TokenizerError(f"{merges_path}: not UTF-8 ({err})") from None
    merges = [line for line in lines if line.strip() and not line.startswith("#version")]
    config = directory / "tokenizer_config.json"
    if config.is_file() and read_json(config).get("add_prefix_space"):
        raise TokenizerError(f"{config}: add_prefix_space is true; prep encodes as RoBERTa does, without it")
    return ByteLevelBPE(vocab, _merge_pairs(merges, merges_path), [vocab_path, merges_path])


def read_tokenizer(directory: Path) -> ByteLevelBPE | SentencePieceVocab:
    """The tokenizer of an HF directory: XLM-R's ``sentencepiece.bpe.model`` where there is
    one, else ``tokenizer.json``'s (a byte-level BPE, or a Unigram model rebuilt as the
    SentencePiece model it came from), else the BPE of ``vocab.json`` + ``merges.txt``;
    where two files are there they must agree.

    Raises:
        TokenizerError: none of them, a file that is neither kind, or two that disagree.
    """
    directory = Path(directory)
    if (directory / SENTENCEPIECE_MODEL).is_file():
        return read_sentencepiece(directory)
    has_json = (directory / TOKENIZER_JSON).is_file()
    has_pair = (directory / VOCAB_JSON).is_file() and (directory / MERGES_TXT).is_file()
    if not has_json and not has_pair:
        raise TokenizerError(
            f"{directory}: no tokenizer ({TOKENIZER_JSON}, {VOCAB_JSON} and {MERGES_TXT}, or {SENTENCEPIECE_MODEL}); "
            "give the model's tokenizer directory with --tokenizer"
        )
    data = read_json(directory / TOKENIZER_JSON) if has_json else None  # parsed once: XLM-R's is 17 MB
    if data is not None and (data.get("model") or {}).get("type") == "Unigram":
        return read_unigram_json(directory, data)
    tokenizer = _read_tokenizer_json(directory / TOKENIZER_JSON, data) if has_json else _read_vocab_merges(directory)
    if has_json and has_pair:
        pair = _read_vocab_merges(directory)
        if (
            pair.vocab != {t: i for t, i in tokenizer.vocab.items() if t in pair.vocab}
            or pair.merges != tokenizer.merges
        ):
            raise TokenizerError(f"{tokenizer.where} and {pair.where} disagree; which is the model's tokenizer?")
    return tokenizer
