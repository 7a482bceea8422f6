"""A tokenizer's ids against a model's: whether they are the same (:func:`check_tokenizer`),
the ``dict.txt`` that gives fairseq the tokenizer's ids (:func:`dictionary_lines`), and
which SentencePiece layout a ``dict.txt`` follows (:func:`dictionary_layout`).
"""

from __future__ import annotations

from pathlib import Path

from ..conventions import MASK, NUM_SPECIALS, SPECIAL_SYMBOLS
from .gpt2_numbering import gpt2_ids
from .tokenizer_files import NOT_USED, SENTENCEPIECE_OWN, ByteLevelBPE, SentencePieceVocab, TokenizerError


def dictionary_layout(dict_path: Path) -> str:
    """The SentencePiece layout a model's ``dict.txt`` follows: CamemBERT's lists the
    model's own three pieces first (:attr:`SentencePieceVocab.symbols`)."""
    with open(dict_path, encoding="utf-8") as lines:
        first = lines.readline().rsplit(" ", 1)[0]
    return "camembert" if first == SENTENCEPIECE_OWN[0] + NOT_USED else "xlm-roberta"


def check_tokenizer(tokenizer: ByteLevelBPE | SentencePieceVocab, model_rows: int, mask: bool = True) -> None:
    """The tokenizer's ids must be the model's: fairseq's specials first, ``<mask>`` last
    (or, where ``mask`` is False, possibly absent: a BART trained for translation has no
    row for it), as many ids as the model has embedding rows, no id twice.

    Raises:
        TokenizerError: naming the tokenizer file and what differs.
    """
    if isinstance(tokenizer, SentencePieceVocab):  # its layout is XLM-R's by construction: only the count
        if tokenizer.size() != model_rows:
            raise TokenizerError(
                f"{tokenizer.where}: {tokenizer.size()} token ids (fairseq's 4 specials, its pieces, <mask>) but "
                f"the model has {model_rows} embedding rows (config.json vocab_size); is this the model's tokenizer?"
            )
        return
    vocab, where = tokenizer.vocab, tokenizer.where
    for index, symbol in enumerate(SPECIAL_SYMBOLS):
        if vocab.get(symbol) != index:
            raise TokenizerError(
                f"{where}: {symbol} has id {vocab.get(symbol)}; RoBERTa-family models (and fairseq's dictionary) "
                f"number {' '.join(SPECIAL_SYMBOLS)} 0 to {NUM_SPECIALS - 1}"
            )
    if tokenizer.size() != model_rows:
        raise TokenizerError(
            f"{where}: {tokenizer.size()} token ids but the model has {model_rows} embedding rows "
            "(config.json vocab_size); is this the model's tokenizer?"
        )
    if vocab.get(MASK) != model_rows - 1 and (mask or MASK in vocab):
        raise TokenizerError(f"{where}: {MASK} has id {vocab.get(MASK)}; RoBERTa-family models have it last")
    if len(set(vocab.values())) != len(vocab):
        raise TokenizerError(f"{where}: two tokens share an id")


def dictionary_lines(tokenizer: ByteLevelBPE | SentencePieceVocab, model_rows: int) -> list[str]:
    """The ``dict.txt`` lines that give the model's ids.

    A SentencePiece model's are its pieces (:attr:`SentencePieceVocab.symbols`). A BPE's go
    through :func:`gpt2_ids`: line ``r`` is the GPT-2 id of model id ``NUM_SPECIALS + r``,
    up to ``<mask>`` (which fairseq's tasks append) or the last row where there is none.
    Ids no piece has (RoBERTa's three padding rows) become ``madeupwordNNNN`` at the end,
    as in RoBERTa's own ``dict.txt``, or an unused GPT-2 id before a piece."""
    if isinstance(tokenizer, SentencePieceVocab):
        return [f"{symbol} 1" for symbol in tokenizer.symbols]
    ids = gpt2_ids(tokenizer.vocab, tokenizer.merges)
    piece_of = {index: piece for piece, index in tokenizer.vocab.items() if piece in ids}
    last_piece = max(piece_of)
    unused = max(ids.values()) + 1
    lines = []
    for model_id in range(NUM_SPECIALS, model_rows - (MASK in tokenizer.vocab)):
        if model_id in piece_of:
            lines.append(f"{ids[piece_of[model_id]]} 0")
        elif model_id > last_piece:
            lines.append(f"madeupword{model_id - last_piece - 1:04d} 0")
        else:
            lines.append(f"{unused} 0")
            unused += 1
    return lines
