"""GPT-2-style byte-level BPE files trained on given texts (:func:`train_bpe`), for tests and
benchmarks, where GPT-2's own files cannot be fetched. Encoding with them is
:mod:`longformer_fs.tokenization`'s.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from tokenizers import ByteLevelBPETokenizer

from longformer_fs import output
from longformer_fs.tokenization import load_gpt2_tokenizer


def train_bpe(texts: Sequence[str], directory: Path, size: int):
    """Write a GPT-2-style ``encoder.json``/``vocab.bpe`` trained on ``texts`` and a
    RoBERTa-style ``dict.txt`` (every BPE id, most frequent first) into ``directory``;
    returns the tokenizer. For tests and benchmarks, where GPT-2's files cannot be fetched.
    """
    directory = Path(directory)
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(texts, vocab_size=size, min_frequency=2, show_progress=False)
    trainer.save_model(str(directory))
    output.move(directory / "vocab.json", directory / "encoder.json")
    output.move(directory / "merges.txt", directory / "vocab.bpe")
    tokenizer = load_gpt2_tokenizer(directory / "encoder.json", directory / "vocab.bpe")
    counts = Counter(i for encoding in tokenizer.encode_batch(list(texts)) for i in encoding.ids)
    for i in range(tokenizer.get_vocab_size()):
        counts.setdefault(i, 0)
    (directory / "dict.txt").write_text("".join(f"{i} {c}\n" for i, c in counts.most_common()))
    return tokenizer
