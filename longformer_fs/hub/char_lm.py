"""``CharLMHubInterface``: the character LM writes text, driven by fairseq's
``SequenceGenerator`` over its incremental decoder (each layer keeps only the keys and
values its window reaches)."""

from __future__ import annotations

import contextlib
import logging
import math

import torch
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.models import FairseqLanguageModel

from ..conventions import EOS, NUM_SPECIALS, byte_symbol

logger = logging.getLogger(__name__)


class _WritesBytes(FairseqLanguageModel):
    """``model`` as generation sees it, with no probability on what is not a byte of text:
    the dictionary's other symbols (``<s>``, ``<unk>``, fairseq's filler words) would be
    dropped from the text, leaving fewer characters than asked for. ``</s>`` stays: the
    generator ends the text with it, and ``min_len`` keeps it out before."""

    def __init__(self, model, allowed: torch.Tensor):
        super().__init__(model.decoder)
        self.model = model
        self.register_buffer("blocked", ~allowed, persistent=False)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        probs = self.model.get_normalized_probs(net_output, log_probs, sample)
        return probs.masked_fill(self.blocked.to(probs.device), -math.inf if log_probs else 0.0)

    def max_positions(self):
        return self.model.max_positions()


class CharLMHubInterface(GeneratorHubInterface):
    """A ``longformer_lm`` model with its task: ``encode``/``decode`` between text and its
    bytes' ids (as ``prep text8`` maps them), ``generate`` as fairseq's, and :meth:`sample`.

    A prompt is read after ``</s>``, as ``eval-bpc``'s stream begins.
    """

    def __init__(self, cfg, task, model):
        super().__init__(cfg, task, [model])
        self.model = self.models[0]
        self.model.eval()
        dictionary = task.source_dictionary
        self._ids = [dictionary.index(byte_symbol(b)) for b in range(256)]
        self._bytes = {i: b for b, i in enumerate(self._ids) if i >= NUM_SPECIALS}
        allowed = torch.zeros(len(dictionary), dtype=torch.bool)
        allowed[[*self._bytes, EOS]] = True
        self._writer = _WritesBytes(self.model, allowed)

    @contextlib.contextmanager
    def _writing_bytes(self):
        """Generation through :class:`_WritesBytes` (``generate`` itself stays fairseq's)."""
        models, self.models = self.models, torch.nn.ModuleList([self._writer])
        try:
            yield
        finally:
            self.models = models

    def encode(self, text: str) -> torch.LongTensor:
        """The ids of ``text``'s UTF-8 bytes (``<unk>`` for bytes the corpus never held), then
        ``</s>``, as fairseq's ``binarize`` ends a line (generation takes it off)."""
        return torch.tensor([self._ids[b] for b in text.encode("utf-8")] + [EOS], dtype=torch.long)

    def decode(self, tokens: torch.LongTensor) -> str:
        """The text of byte ids (special symbols dropped; broken UTF-8 replaced)."""
        return bytes(self._bytes[i] for i in tokens.tolist() if i in self._bytes).decode("utf-8", errors="replace")

    def translate(self, *args, **kwargs):
        raise NotImplementedError("translate: a character LM continues text; call sample(prompt, max_new=...)")

    def sample(
        self,
        sentences: str | list[str],
        beam: int = 1,
        verbose: bool = False,
        *,
        max_new: int = 200,
        greedy: bool = False,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = -1.0,
        seed: int | None = None,
    ) -> str | list[str]:
        """The ``max_new`` bytes that follow each prompt of ``sentences`` (a text or a list),
        as text: sampled (``temperature``, top-``k``, top-``p``; reproducible with ``seed``),
        or the most likely with ``greedy`` (``beam`` > 1: beam search). Only bytes: no other
        symbol of the dictionary is written. The first three arguments are fairseq's
        (``GeneratorHubInterface.sample``); ``verbose`` logs each prompt and continuation."""
        if max_new < 1:
            raise ValueError(f"max_new: generate at least one character, got {max_new}")
        if not isinstance(sentences, str):
            return [self.sample(prompt, beam, verbose, max_new=max_new, greedy=greedy, temperature=temperature,
                                top_k=top_k, top_p=top_p, seed=seed) for prompt in sentences]  # fmt: skip
        prompt_ids = self.encode(sentences)
        length = len(prompt_ids) - 1 + max_new  # the prompt and max_new more, no end before
        settings = {"max_len_a": 0, "max_len_b": length, "min_len": length}
        if not greedy:
            settings |= {"sampling": True, "sampling_topk": top_k, "sampling_topp": top_p, "temperature": temperature}
        if seed is not None:
            torch.manual_seed(seed)
        with self._writing_bytes():
            hypothesis = self.generate([prompt_ids], beam=beam, **settings)[0][0]["tokens"]
        text = self.decode(hypothesis[len(prompt_ids) - 1 :])
        if verbose:
            logger.info("S\t%s", sentences)
            logger.info("H\t%s", text)
        return text
