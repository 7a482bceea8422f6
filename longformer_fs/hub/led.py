"""``LEDHubInterface``: fairseq's BART hub interface for ``led``, summarizing as ``summarize``."""

from __future__ import annotations

import logging

import torch
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.models.bart.hub_interface import BARTHubInterface

from ..conventions import BOS, EOS
from ..evaluation.summarization import GenerationSettings, generate, source_tokens, to_text
from ..tokenization import SubwordEncoder

DEFAULTS = GenerationSettings()
logger = logging.getLogger(__name__)


class LEDHubInterface(BARTHubInterface):
    """An ``led`` model with its task and tokenizer: ``encode``, ``decode`` and ``generate``
    as BART's (the first ``<s>`` of a source is global), and :meth:`sample`, which
    summarizes texts with ``summarize``'s beam search."""

    def __init__(self, cfg, task, model, tokenizer: SubwordEncoder):
        super().__init__(cfg, task, model)
        self.tokenizer = tokenizer
        self.model.eval()

    @property
    def max_source_positions(self) -> int:
        return self.model.max_positions()[0]

    def encode(self, sentence: str, *addl_sentences: str, no_separator: bool = True) -> torch.LongTensor:
        """``<s> sentence </s>`` cut to the model's source positions (further sentences follow,
        each ending with ``</s>``, one more between them without ``no_separator``)."""
        ids = source_tokens(self.tokenizer.encode([sentence])[0], self.max_source_positions).tolist()
        for other in addl_sentences:
            ids += ([] if no_separator else [EOS]) + [int(i) for i in self.tokenizer.encode([other])[0]] + [EOS]
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, tokens: torch.LongTensor) -> str | list[str]:
        """The text of ``tokens`` (1-D); a list of texts where ``</s> </s>`` separates them."""
        if tokens.dim() != 1:
            raise ValueError(f"tokens: expected one sequence (1-D), got shape {tuple(tokens.shape)}")
        ids = tokens.tolist()
        texts, current = [], []
        for i, token in enumerate(ids):
            if token == EOS and i + 1 < len(ids) and ids[i + 1] == EOS:
                texts.append(current)
                current = []
            elif token not in (BOS, EOS):
                current.append(token)
        texts.append(current)
        decoded = [self.tokenizer.decode(t) for t in texts]
        return decoded[0] if len(decoded) == 1 else decoded

    def generate(self, tokenized_sentences, beam: int = DEFAULTS.beam, *args, **kwargs):
        """fairseq's generation (``SequenceGenerator``; ``kwargs`` are its settings: ``lenpen``,
        ``min_len``, ``max_len_b``, ``no_repeat_ngram_size``, ``sampling``...), the
        decoder starting from ``</s>`` as in training, with no ``<s>`` forced after it."""
        return GeneratorHubInterface.generate(self, tokenized_sentences, beam, *args, **kwargs)

    def translate(self, sentences: str | list[str], beam: int = DEFAULTS.beam, verbose: bool = False, **kwargs):
        """fairseq's name for :meth:`sample` (``GeneratorHubInterface.translate``), with
        ``summarize``'s beam by default rather than fairseq's 5."""
        return self.sample(sentences, beam, verbose, **kwargs)

    def sample(
        self,
        sentences: str | list[str],
        beam: int = DEFAULTS.beam,
        verbose: bool = False,
        *,
        lenpen: float = DEFAULTS.lenpen,
        min_len: int = DEFAULTS.min_len,
        max_len_b: int = DEFAULTS.max_len,
        no_repeat_ngram_size: int = DEFAULTS.no_repeat_ngram_size,
        batch_size: int = 4,
    ) -> str | list[str]:
        """Summaries of ``sentences`` (a text or a list of texts), one sentence a line, with
        ``summarize``'s beam search and defaults (beam 4, length penalty 2.0, no repeated
        3-gram, 20 to 512 tokens). The first three arguments are fairseq's
        (``GeneratorHubInterface.sample``); ``verbose`` logs each source and summary."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        settings = GenerationSettings(beam, lenpen, no_repeat_ngram_size, min_len, max_len_b)
        sources = [source_tokens(ids, self.max_source_positions) for ids in self.tokenizer.encode(texts)]
        summaries = [
            to_text(ids, self.tokenizer) for ids in generate(self.model, self.task, sources, settings, batch_size)
        ]
        if verbose:
            for text, summary in zip(texts, summaries, strict=True):
                logger.info("S\t%s", text)
                logger.info("H\t%s", summary)
        return summaries[0] if single else summaries

    def fill_mask(self, *args, **kwargs):
        raise NotImplementedError(
            "fill_mask: an LED hub summarizes (sample, translate); BART's mask filling is not offered"
        )
