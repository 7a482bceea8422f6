"""An HF tokenizer for a model's ids, written (``export-hf --tokenizer``, and an LED's
``export-onnx``): from an HF tokenizer directory as it is, from GPT-2's files through the
model's ``dict.txt``, or from a SentencePiece model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..conventions import (
    MASK,
    SENTENCEPIECE_MODEL,
    SPECIAL_SYMBOLS,
    UNK,
    dictionary_lookup,
    dictionary_size,
    vocab_size,
)
from .token_ids import dictionary_layout
from .tokenizer_files import (
    ENCODER_JSON,
    MERGES_TXT,
    TOKENIZER_CONFIG,
    VOCAB_BPE,
    VOCAB_JSON,
    TokenizerError,
    read_json,
    read_sentencepiece,
)


def write_hf_tokenizer(source: Path, dict_path: Path, out_dir: Path) -> str:
    """Save an HF tokenizer for the model's ids into ``out_dir``: from an HF tokenizer
    directory as it is, from GPT-2's ``encoder.json`` + ``vocab.bpe`` mapped through
    fairseq's ``dict.txt`` (the mapping ``prep`` uses), or from a ``sentencepiece.bpe.model``
    whose pieces ``dict.txt`` lists in XLM-R's or CamemBERT's order (what ``convert-roberta``
    and ``import-hf`` write). Returns which it was.

    Raises:
        TokenizerError: ``dict.txt`` lacks pieces of the BPE, lists other pieces than the
            SentencePiece model's, or ``source`` holds no kind of tokenizer.
    """
    from transformers import AutoTokenizer, CamembertTokenizer, RobertaTokenizer, XLMRobertaTokenizer

    source, out_dir = Path(source), Path(out_dir)
    if (source / SENTENCEPIECE_MODEL).is_file() and not (source / TOKENIZER_CONFIG).is_file():
        vocab = read_sentencepiece(source, layout=dictionary_layout(dict_path))
        listed = [line.rsplit(" ", 1)[0] for line in Path(dict_path).read_text(encoding="utf-8").splitlines()]
        if listed != vocab.symbols:
            extra = [s for s in listed if s not in set(vocab.symbols)]
            raise TokenizerError(
                f"--dict: {dict_path} does not list {vocab.model}'s pieces in its order"
                + (f" (it adds {extra[:4]})" if extra else "")
                + "; an HF XLM-R or CamemBERT tokenizer gives those ids only"
            )
        hf_class = CamembertTokenizer if vocab.layout == "camembert" else XLMRobertaTokenizer
        hf_class.from_pretrained(str(source), local_files_only=True).save_pretrained(out_dir)
        return "sentencepiece+dict.txt"
    if (source / ENCODER_JSON).is_file() and (source / VOCAB_BPE).is_file():
        gpt2 = {int(i): tok for tok, i in read_json(source / ENCODER_JSON).items()}
        model_id = dictionary_lookup(dict_path, vocab_size(source / ENCODER_JSON))
        # Every BPE piece needs its own id for the merges that pass through it, and the
        # model has ids only for the dictionary's: a partial dictionary cannot be exported.
        missing = [piece for i, piece in sorted(gpt2.items()) if model_id[i] == UNK]
        if missing:
            raise TokenizerError(
                f"--dict: {dict_path} lacks {len(missing)} of the BPE's {len(gpt2)} pieces "
                f"(e.g. {missing[0]!r}); an HF tokenizer needs them all (RoBERTa's dict.txt has them)"
            )
        vocab = {
            **{symbol: index for index, symbol in enumerate(SPECIAL_SYMBOLS)},
            **{piece: int(model_id[i]) for i, piece in gpt2.items()},
            MASK: dictionary_size(dict_path),
        }  # masked_lm adds <mask> after the dictionary
        (out_dir / VOCAB_JSON).write_text(json.dumps(vocab, ensure_ascii=False))
        shutil.copyfile(source / VOCAB_BPE, out_dir / MERGES_TXT)
        RobertaTokenizer.from_pretrained(str(out_dir), local_files_only=True).save_pretrained(out_dir)
        return "gpt2-bpe+dict.txt"
    try:
        AutoTokenizer.from_pretrained(str(source), local_files_only=True).save_pretrained(out_dir)
    except (OSError, ValueError) as err:
        raise TokenizerError(
            f"--tokenizer: {source} holds neither an HF tokenizer nor GPT-2's encoder.json "
            f"and vocab.bpe ({str(err).splitlines()[0]})"
        ) from None
    return "hf"
