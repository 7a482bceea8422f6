"""Summaries from an encoder-decoder checkpoint (LED, BART) with fairseq's beam search.

:func:`generate` runs fairseq's ``SequenceGenerator`` (incremental decoding, beam search,
length penalty, n-gram blocking) over batches of sources (``longformer-fs summarize``
reads them from the files people bring). Sources are ``<s> tokens </s>``, as
``prep summarization`` writes them and LED's global token expects, cut to the model's
source positions.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from fairseq.data import data_utils
from fairseq.dataclass.configs import GenerationConfig

from ..conventions import BOS, EOS, PAD
from ..serving.beam_search import GenerationSettings
from ..serving.summarizer import to_text

__all__ = ["GenerationSettings", "generate", "source_tokens", "to_text"]


def source_tokens(ids, max_positions: int) -> torch.Tensor:
    """``<s> ids </s>`` in at most ``max_positions`` tokens."""
    body = torch.as_tensor(ids, dtype=torch.long)[: max(0, max_positions - 2)]
    return torch.cat([torch.tensor([BOS]), body, torch.tensor([EOS])])


def generate(
    model,
    task,
    sources: list[torch.Tensor],
    settings: GenerationSettings,
    batch_size: int = 4,
    progress: Callable[[Iterable], Iterable] = lambda it: it,
) -> list[list[int]]:
    """The best hypothesis (token ids without ``</s>``) for every source, in order."""
    settings.check()
    generator = task.build_generator(
        [model],
        GenerationConfig(beam=settings.beam, lenpen=settings.lenpen, no_repeat_ngram_size=settings.no_repeat_ngram_size,
                         min_len=settings.min_len, max_len_a=0, max_len_b=settings.max_len),
    )  # fmt: skip
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))  # similar lengths share a batch
    results: dict[int, list[int]] = {}
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for batch in progress(batches):
        tokens = data_utils.collate_tokens([sources[i] for i in batch], PAD, left_pad=False)
        sample = {
            "net_input": {
                "src_tokens": tokens.to(device),
                "src_lengths": torch.tensor([len(sources[i]) for i in batch], device=device),
            }
        }
        with torch.no_grad():
            hypotheses = generator.generate([model], sample)
        for index, hypos in zip(batch, hypotheses, strict=True):
            results[index] = [int(t) for t in hypos[0]["tokens"] if int(t) != EOS]
    return [results[i] for i in range(len(sources))]
