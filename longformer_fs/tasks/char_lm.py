"""fairseq adapter: the ``longformer_char_lm`` task.

fairseq's language-modeling task over a byte stream made by ``longformer-fs prep``: no
sentence breaks (``sample_break_mode=none``), blocks of ``tokens_per_sample``
characters, each predicting the next character.

Its input and output are text to fairseq's own tools, with no flag: the dictionary
(:class:`ByteDictionary`) shows its ``0xHH`` symbols as the bytes' text, and the task's
BPE (:class:`ByteText`, unless ``--bpe`` names another) reads a line of text as its UTF-8
bytes. So ``fairseq-interactive`` reads a prompt as ``sample`` does and prints the
continuation as text, ``fairseq-generate`` prints text, and ``fairseq-eval-lm
--output-word-probs`` prints each byte as its character.
"""

import os
import re
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import (
    AppendTokenDataset,
    Dictionary,
    IdDataset,
    ListDataset,
    NestedDictionaryDataset,
    NumelDataset,
    PadDataset,
    PrependTokenDataset,
    StripTokenDataset,
)
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..conventions import byte_symbol

_BYTE_SYMBOL = re.compile(r"0x([0-9a-f]{2})")


class ByteDictionary(Dictionary):
    """A character corpus's ``dict.txt`` (each byte seen as ``0xHH``, :func:`byte_symbol`),
    shown as text where fairseq's tools show symbols: ``string`` gives the ids' text (UTF-8,
    broken sequences replaced), and ``self[i]`` one byte's character (``\\n``, ``\\t`` and
    bytes above ASCII escaped, as one byte of a character is not text). Ids, files and
    lookups (``index``, ``symbols``, ``save``) are fairseq's."""

    def byte(self, idx: int) -> int | None:
        """The byte that id ``idx`` stands for, or None (a special or another symbol)."""
        if idx < self.nspecial or idx >= len(self.symbols):
            return None
        match = _BYTE_SYMBOL.fullmatch(self.symbols[idx])
        return int(match[1], 16) if match else None

    def __getitem__(self, idx):
        value = self.byte(idx)
        if value is None:
            return super().__getitem__(idx)
        if 0x20 <= value < 0x7F:
            return chr(value)
        return repr(chr(value))[1:-1] if value < 0x80 else f"\\x{value:02x}"  # \n, \x00; \xc3

    def string(self, tensor, bpe_symbol=None, escape_unk=False, extra_symbols_to_ignore=None, unk_string=None,
               include_eos=False, separator=" "):  # fmt: skip
        """The text of ``tensor``'s ids (a 2-D tensor: one line per row): bytes decoded as
        UTF-8, ``<unk>`` as ``unk_string`` (or ``<unk>``), other specials left out (``</s>``
        kept with ``include_eos``). fairseq's BPE and separator options do not apply to bytes."""
        if torch.is_tensor(tensor) and tensor.dim() == 2:
            return "\n".join(self.string(t, bpe_symbol, escape_unk, extra_symbols_to_ignore, unk_string, include_eos)
                             for t in tensor)  # fmt: skip
        ignored = set(extra_symbols_to_ignore or ()) | {self.bos(), self.pad()}
        if not include_eos:
            ignored.add(self.eos())
        unk = unk_string or self.unk_string(escape_unk)
        text, pending = [], bytearray()
        for idx in (int(i) for i in tensor):
            if idx in ignored:
                continue
            value = self.byte(idx)
            if value is not None:
                pending.append(value)
                continue
            text.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            text.append(unk if idx == self.unk() else self.symbols[idx] if idx < len(self.symbols) else unk)
        text.append(pending.decode("utf-8", errors="replace"))
        return "".join(text)


class ByteText:
    """The task's BPE for fairseq's tools (``task.build_bpe``): text <-> the ``0xHH``
    symbols of its UTF-8 bytes, as ``encode_line`` reads them. ``decode`` is the identity,
    as :meth:`ByteDictionary.string` already gives text."""

    def encode(self, text: str) -> str:
        return " ".join(byte_symbol(b) for b in text.encode("utf-8"))

    def decode(self, text: str) -> str:
        return text

    def is_beginning_of_word(self, symbol: str) -> bool:
        return True


@dataclass
class CharLMConfig(LanguageModelingConfig):
    sample_break_mode: str = field(
        default="none", metadata={"help": "'none': the split is one stream cut into tokens_per_sample blocks"}
    )
    tokens_per_sample: int = field(default=2048, metadata={"help": "characters per training sequence"})


@register_task("longformer_char_lm", dataclass=CharLMConfig)
class CharLMTask(LanguageModelingTask):
    @classmethod
    def setup_dictionary(cls, args, **kwargs):
        """fairseq's, with the data's ``dict.txt`` read as a :class:`ByteDictionary`."""
        dictionary, output_dictionary = super().setup_dictionary(args, **kwargs)
        if dictionary is None:
            return dictionary, output_dictionary
        byte_dictionary = ByteDictionary.load(os.path.join(utils.split_paths(args.data)[0], "dict.txt"))
        same = output_dictionary is dictionary
        return byte_dictionary, byte_dictionary if same else output_dictionary

    def build_bpe(self, args):
        """:class:`ByteText`, unless ``--bpe`` names one: fairseq's tools read text as bytes."""
        if args is not None and getattr(args, "_name", None):
            return super().build_bpe(args)
        return ByteText()

    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        """Prompts for generation, each one item: ``</s> prompt`` as the source (its final
        ``</s>`` taken off), the target padded, as fairseq's language-modeling task makes
        them. fairseq's own builds a ``TokenBlockDataset`` in ``eos`` mode, one block an
        item, whose code needs ``np.compat``, which numpy 2 removed."""
        dictionary = self.source_dictionary
        prompts = StripTokenDataset(ListDataset(src_tokens, np.asarray(src_lengths)), dictionary.eos())
        source = PrependTokenDataset(prompts, token=dictionary.eos())
        target = AppendTokenDataset(prompts, token=dictionary.pad())
        return NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "src_tokens": PadDataset(source, pad_idx=dictionary.pad(), left_pad=False),
                    "src_lengths": NumelDataset(source, reduce=False),
                },
                "target": PadDataset(target, pad_idx=dictionary.pad(), left_pad=False),
            },
            sizes=[np.asarray(src_lengths)],
        )
