"""GPT-2 byte-level BPE, as RoBERTa uses it, with ids mapped to a fairseq ``dict.txt``.

Encoding is HF ``tokenizers`` (Rust). RoBERTa's ``dict.txt`` lists GPT-2 ids (as
strings) in model order after fairseq's four specials, so a lookup table turns GPT-2
ids into model ids; GPT-2 ids missing from the dictionary become ``<unk>``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import ByteLevelBPETokenizer, Tokenizer, decoders, models, pre_tokenizers, processors

from .fairseq_dataset import NUM_SPECIALS, UNK


class BpeError(ValueError):
    """The BPE files or the dictionary are unusable."""


def load_tokenizer(encoder_json: Path, vocab_bpe: Path):
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


def dictionary_lookup(dict_txt: Path, gpt2_vocab_size: int) -> np.ndarray:
    """``lut[gpt2_id] = fairseq id`` (``<unk>`` where the dictionary lacks the id).

    Symbols that are not GPT-2 ids may follow the ids (RoBERTa's ``madeupword`` padding,
    symbols added for a task such as WikiHop's ``[q]``); one before them means the file
    is not a GPT-2 BPE dictionary.
    """
    if not Path(dict_txt).is_file():
        raise BpeError(f"{dict_txt}: not found (the model's fairseq dict.txt)")
    lut = np.full(gpt2_vocab_size, UNK, dtype=np.int64)
    added = None  # the first symbol that is not a GPT-2 id
    for index, line in enumerate(Path(dict_txt).read_text(encoding="utf-8").splitlines()):
        symbol = line.rsplit(" ", 1)[0]
        if symbol.isdigit():
            if added is not None:
                raise BpeError(f"{dict_txt}:{index + 1}: GPT-2 id {symbol} after the added symbol {added!r}")
            if int(symbol) < gpt2_vocab_size:
                lut[int(symbol)] = NUM_SPECIALS + index
        elif index == 0:
            raise BpeError(f"{dict_txt}:1: {symbol!r} is not a GPT-2 id; is this RoBERTa's dict.txt?")
        else:
            added = added or symbol
    return lut


def vocab_size(encoder_json: Path) -> int:
    return max(json.loads(Path(encoder_json).read_text(encoding="utf-8")).values()) + 1


def dictionary_size(dict_txt: Path) -> int:
    return NUM_SPECIALS + sum(1 for _ in Path(dict_txt).open(encoding="utf-8"))


def train_bpe(texts: Sequence[str], directory: Path, size: int):
    """Write a GPT-2-style ``encoder.json``/``vocab.bpe`` trained on ``texts`` and a
    RoBERTa-style ``dict.txt`` (every BPE id, most frequent first) into ``directory``;
    returns the tokenizer. For tests and benchmarks, where GPT-2's files cannot be fetched.
    """
    directory = Path(directory)
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(texts, vocab_size=size, min_frequency=2, show_progress=False)
    trainer.save_model(str(directory))
    (directory / "vocab.json").replace(directory / "encoder.json")
    (directory / "merges.txt").replace(directory / "vocab.bpe")
    tokenizer = load_tokenizer(directory / "encoder.json", directory / "vocab.bpe")
    counts = Counter(i for encoding in tokenizer.encode_batch(list(texts)) for i in encoding.ids)
    for i in range(tokenizer.get_vocab_size()):
        counts.setdefault(i, 0)
    (directory / "dict.txt").write_text("".join(f"{i} {c}\n" for i, c in counts.most_common()))
    return tokenizer
