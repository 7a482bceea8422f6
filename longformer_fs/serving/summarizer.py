"""An LED exported by ``export-onnx`` summarizing documents with onnxruntime, numpy and HF's
``tokenizers``: no torch.

The directory holds optimum's seq2seq layout (``export-onnx``'s LED report lists it):
``encoder_model.onnx``, ``decoder_model.onnx`` (the first step, which also computes every
layer's cross-attention keys and values), ``decoder_with_past_model.onnx`` (each later
step), ``tokenizer.json`` with the model's ids, and ``generation_config.json`` (the
special ids, the positions, and ``summarize``'s beam settings). Sources are
``<s> text </s>`` cut to the encoder's positions, the first ``<s>`` global (the encoder
file makes it so, as in training); the search is fairseq's (:mod:`.beam_search`).

``longformer-fs summarize-onnx MODEL_DIR doc.pdf notes.txt`` runs it on documents.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np

from ..conventions import split_sentences
from .beam_search import GenerationSettings, beam_search
from .sessions import cpu_session

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model.onnx"
DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"
TOKENIZER_FILE = "tokenizer.json"
GENERATION_CONFIG = "generation_config.json"
# generation_config.json's keys (HF's names) for GenerationSettings' fields.
CONFIG_KEYS = {"beam": "num_beams", "lenpen": "length_penalty", "no_repeat_ngram_size": "no_repeat_ngram_size",
               "min_len": "min_length", "max_len": "max_length"}  # fmt: skip


def to_text(ids: list[int], tokenizer) -> str:
    """A summary's text, one sentence per line (ROUGE-Lsum's convention); ``tokenizer.decode(ids) -> str``."""
    return "\n".join(split_sentences(tokenizer.decode(ids).strip()))


def cache_names(layers: int, prefix: str, parts=("decoder", "encoder")) -> list[str]:
    """``{prefix}.{i}.{part}.key`` and ``.value`` for every layer, in the files' order."""
    return [f"{prefix}.{i}.{part}.{kv}" for i in range(layers) for part in parts for kv in ("key", "value")]


class OnnxSummarizer:
    """The three files of an exported LED in onnxruntime, and its tokenizer.

    Args:
        directory: what ``export-onnx`` wrote for an LED checkpoint.
        threads: onnxruntime's intra-op threads (default: its own choice).
    """

    def __init__(self, directory: Path, threads: int | None = None):
        from tokenizers import Tokenizer

        directory = Path(directory)
        missing = [f for f in (ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE, TOKENIZER_FILE, GENERATION_CONFIG)
                   if not (directory / f).is_file()]  # fmt: skip
        if missing:
            raise FileNotFoundError(f"model: {directory} lacks {', '.join(missing)} (write it with export-onnx)")
        self.config = json.loads((directory / GENERATION_CONFIG).read_text())
        self.encoder, self.decoder, self.decoder_with_past = (
            cpu_session(directory / name, threads) for name in (ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE)
        )
        self.tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        self.layers = int(self.config["decoder_layers"])

    @property
    def settings(self) -> GenerationSettings:
        """The beam settings the export recorded (``summarize``'s)."""
        return GenerationSettings(**{f.name: self.config[CONFIG_KEYS[f.name]] for f in fields(GenerationSettings)})

    def source_ids(self, text: str) -> list[int]:
        """``<s> tokens </s>`` in at most the encoder's positions."""
        body = self.tokenizer.encode(text, add_special_tokens=False).ids
        keep = max(0, int(self.config["max_source_positions"]) - 2)
        return [self.config["bos_token_id"], *body[:keep], self.config["eos_token_id"]]

    def encode(self, ids: list[int]) -> np.ndarray:
        """The encoder's ``(1, S, C)`` states for one source."""
        tokens = np.array([ids], dtype=np.int64)
        ones = np.ones_like(tokens)
        return self.encoder.run(None, {"input_ids": tokens, "attention_mask": ones,
                                       "global_attention_mask": np.zeros_like(tokens)})[0]  # fmt: skip

    def generate(self, ids: list[int], settings: GenerationSettings | None = None) -> list[int]:
        """The best summary's token ids (without ``</s>``) for source ``ids``."""
        settings = settings or self.settings
        settings.check()
        states = np.repeat(self.encode(ids), settings.beam, axis=0)
        mask = np.ones((settings.beam, states.shape[1]), dtype=np.int64)
        past: dict[str, np.ndarray] = {}
        decoder_past = cache_names(self.layers, "past_key_values", ("decoder",))

        def step(last: np.ndarray, order: np.ndarray | None) -> np.ndarray:
            if not past:
                outputs = self.decoder.run(None, {"input_ids": last, "encoder_hidden_states": states,
                                                  "encoder_attention_mask": mask})  # fmt: skip
                past.update(zip(cache_names(self.layers, "past_key_values"), outputs[1:], strict=True))
                return outputs[0][:, -1]
            # One source a search: the cross-attention keys and values are the same in
            # every row, so only the self-attention caches follow the beams.
            feed = {name: past[name][order] for name in decoder_past}
            outputs = self.decoder_with_past.run(
                None,
                {"input_ids": last, "encoder_attention_mask": mask, **feed,
                 **{name: past[name] for name in past if name not in feed}},
            )  # fmt: skip
            past.update(zip(decoder_past, outputs[1:], strict=True))
            return outputs[0][:, -1]

        max_len = min(settings.max_len, int(self.config["max_target_positions"]) - 1)
        return beam_search(step, settings, self.config["eos_token_id"], self.config["pad_token_id"], max_len)

    def summarize(self, text: str, settings: GenerationSettings | None = None) -> str:
        """The summary of ``text``, one sentence a line."""
        return to_text(self.generate(self.source_ids(text), settings), self.tokenizer)
