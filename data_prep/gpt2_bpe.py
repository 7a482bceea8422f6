"""GPT-2 byte-level BPE, as RoBERTa uses it.

Encoding is HF ``tokenizers`` (Rust). The map from GPT-2 ids to the model's, through
RoBERTa's ``dict.txt``, is shared with the plugin: :func:`longformer_fs.conventions.dictionary_lookup`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from tokenizers import ByteLevelBPETokenizer, Tokenizer, decoders, models, pre_tokenizers, processors

from longformer_fs.conventions import BpeError


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
