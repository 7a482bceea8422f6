"""How text becomes a fairseq model's dictionary ids, and back: what prepared data and
the models agree on, beside :mod:`.conventions`. ``prep`` encodes its corpora with it, and
the hub interfaces (:mod:`.hub`) and ``summarize`` the text they are given, so a model sees
the same ids in use as in training.

Two kinds behind one interface (:class:`SubwordEncoder`), chosen by a picklable
:class:`SubwordSpec` that worker processes load again:

- ``gpt2``: GPT-2's byte-level BPE (``encoder.json`` + ``vocab.bpe``, run by HF
  ``tokenizers``) mapped through the model's ``dict.txt``, as RoBERTa and BART use it;
- ``spm``: a SentencePiece model, for corpora and models that are not RoBERTa's. Its
  ``dict.txt`` is written from the model's vocabulary in fairseq's convention: every
  piece but SentencePiece's own ``<unk>``/``<s>``/``</s>`` (fairseq's dictionary has
  those first), in SentencePiece id order.

Offsets are character positions ``[start, end)`` in the text given, so a span found in
the text (an answer, a truncation point) maps to tokens and back exactly.

Like :mod:`.conventions`, this module imports nothing of torch or fairseq (``prep``'s
spawn workers import it).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import sentencepiece
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

from .conventions import NUM_SPECIALS, UNK, BpeError, dictionary_lookup, dictionary_size, vocab_size

KINDS = ("gpt2", "spm")


@dataclass(frozen=True)
class SubwordSpec:
    """Which encoder, from which files.

    Attributes:
        kind: ``"gpt2"`` or ``"spm"``.
        files: gpt2: ``(encoder.json, vocab.bpe)``; spm: ``(model,)``.
        dict_txt: the model's fairseq ``dict.txt``: required for gpt2; for spm, None
            writes one from the model's vocabulary (a given one must list its pieces).
    """

    kind: str
    files: tuple[Path, ...]
    dict_txt: Path | None = None

    @classmethod
    def gpt2(cls, encoder_json: Path, vocab_bpe: Path, dict_txt: Path) -> SubwordSpec:
        return cls("gpt2", (Path(encoder_json), Path(vocab_bpe)), Path(dict_txt))

    @classmethod
    def spm(cls, model: Path, dict_txt: Path | None = None) -> SubwordSpec:
        return cls("spm", (Path(model),), Path(dict_txt) if dict_txt else None)

    def input_files(self) -> list[Path]:
        """Every file the encoding depends on (for manifests)."""
        return list(self.files) + ([self.dict_txt] if self.dict_txt else [])

    def load(self) -> SubwordEncoder:
        for path in self.input_files():
            if not Path(path).is_file():
                raise BpeError(
                    f"{path}: not found ({'GPT-2 BPE' if self.kind == 'gpt2' else 'SentencePiece'} "
                    "files and the model's dict.txt)"
                )
        if self.kind == "gpt2":
            return Gpt2BpeEncoder(*self.files, self.dict_txt)
        if self.kind == "spm":
            return SentencePieceEncoder(self.files[0], self.dict_txt)
        raise ValueError(f"subword: unknown kind {self.kind!r}; expected one of {KINDS}")


class SubwordEncoder:
    """Text to model ids. Subclasses fill ``dictionary_size`` and the two encoders."""

    dictionary_size: int  # ids the model's embedding needs: fairseq's specials + dict.txt

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Model ids (int64, no ``<s>``/``</s>``) of each text."""
        return [ids for ids, _ in self.encode_with_offsets(texts)]

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text, ``(ids (n,), offsets (n, 2))``: token i covers ``text[start:end]``."""
        raise NotImplementedError

    def write_dictionary(self, path: Path) -> None:
        """The ``dict.txt`` whose ids these are."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of model ids (specials and ids outside the vocabulary are dropped)."""
        raise NotImplementedError


class Gpt2BpeEncoder(SubwordEncoder):
    def __init__(self, encoder_json: Path, vocab_bpe: Path, dict_txt: Path):
        self.tokenizer = load_gpt2_tokenizer(encoder_json, vocab_bpe)
        self.lookup = dictionary_lookup(dict_txt, vocab_size(encoder_json))
        self.dict_txt = Path(dict_txt)
        self.dictionary_size = dictionary_size(dict_txt)
        self.gpt2_of = {int(model): gpt2 for gpt2, model in enumerate(self.lookup) if model != UNK}  # for decode

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [
            (self.lookup[np.asarray(e.ids, dtype=np.int64)], np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2))
            for e in encodings
        ]

    def write_dictionary(self, path: Path) -> None:
        shutil.copyfile(self.dict_txt, path)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([self.gpt2_of[int(i)] for i in ids if int(i) in self.gpt2_of])


class SentencePieceEncoder(SubwordEncoder):
    def __init__(self, model: Path, dict_txt: Path | None = None):
        try:
            self.processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
        except (OSError, RuntimeError) as err:
            raise BpeError(f"--spm: {model} is not a SentencePiece model ({str(err).splitlines()[0]})") from None
        sp = self.processor
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        if dict_txt is None:
            self.symbols = [p for i, p in enumerate(pieces) if not (sp.is_control(i) or sp.is_unknown(i))]
        else:
            self.symbols = [line.rsplit(" ", 1)[0] for line in Path(dict_txt).read_text(encoding="utf-8").splitlines()]
        index = {symbol: NUM_SPECIALS + i for i, symbol in enumerate(self.symbols)}
        # SentencePiece's own <unk> (and any piece a given dict.txt lacks) is fairseq's <unk>.
        self.lookup = np.array([index.get(p, UNK) for p in pieces], dtype=np.int64)
        self.dictionary_size = NUM_SPECIALS + len(self.symbols)

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for text in texts:
            proto = self.processor.encode(text, return_type="proto")
            ids = self.lookup[np.asarray([p.id for p in proto.pieces], dtype=np.int64)]
            # SentencePiece reports UTF-8 byte offsets; map them to characters.
            char_at_byte = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
            byte_offsets = np.asarray([(p.begin, p.end) for p in proto.pieces], dtype=np.int64).reshape(-1, 2)
            out.append((ids, np.searchsorted(char_at_byte, byte_offsets)))
        return out

    def write_dictionary(self, path: Path) -> None:
        Path(path).write_text("".join(f"{symbol} 1\n" for symbol in self.symbols), encoding="utf-8")

    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self.symbols[i - NUM_SPECIALS] for i in ids if NUM_SPECIALS <= int(i) < self.dictionary_size]
        return self.processor.decode_pieces(pieces)


def load_gpt2_tokenizer(encoder_json: Path, vocab_bpe: Path):
    """GPT-2's byte-level BPE from its two files, as HF ``tokenizers`` runs it (Rust)."""
    for path in (encoder_json, vocab_bpe):
        if not Path(path).is_file():
            raise BpeError(f"{path}: not found (GPT-2's encoder.json and vocab.bpe are needed)")
    try:
        model = models.BPE.from_file(str(encoder_json), str(vocab_bpe))
    except Exception as err:  # the Rust side reports parse errors as generic exceptions
        raise BpeError(f"{encoder_json} / {vocab_bpe}: not a GPT-2 BPE ({err})") from None
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # Offsets without the space a piece starts with: spans found in the text map to tokens exactly.
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    return tokenizer
