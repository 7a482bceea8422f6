"""``export-onnx`` on an ``led`` checkpoint: three ONNX files in the layout seq2seq ONNX
tools know (HF optimum's names), served without torch by
:mod:`longformer_fs.serving.summarizer`.

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask``, ``global_attention_mask``
  (int64 ``(batch, source)``) -> ``last_hidden_state``. The band runs through the same
  lowering as an encoder's export (:mod:`.onnx_band`); the first ``<s>`` is global whatever
  the mask says, as in training.
- ``decoder_model.onnx``, the first step: ``input_ids`` ``(batch, target)``,
  ``encoder_hidden_states``, ``encoder_attention_mask`` -> ``logits`` and
  ``present.{i}.decoder.key/value`` and ``present.{i}.encoder.key/value``.
- ``decoder_with_past_model.onnx``, each later step: ``input_ids`` ``(batch, 1)``,
  ``encoder_attention_mask`` and ``past_key_values.{i}.decoder/encoder.key/value`` ->
  ``logits`` and ``present.{i}.decoder.key/value``.

Caches are ``(batch, heads, length, head dim)``. The decoder is fairseq's, written out
with its caches as tensors (:class:`DecoderGraph`) since fairseq keeps them in a
dictionary the exporter cannot follow; its weights are the model's own modules.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LearnedPositionalEmbedding

from ..checkpoint import Checkpoint
from ..conventions import BOS, EOS, PAD, UNK
from ..evaluation.summarization import generate
from ..hf_format.tokenizer_files import TokenizerError
from ..hf_format.tokenizer_out import write_hf_tokenizer
from ..output import guarded_output
from ..serving.beam_search import GenerationSettings
from ..serving.summarizer import (
    CONFIG_KEYS,
    DECODER_FILE,
    DECODER_WITH_PAST_FILE,
    ENCODER_FILE,
    GENERATION_CONFIG,
    OnnxSummarizer,
    cache_names,
)
from .errors import OnnxExportError
from .onnx_quantize import quantize_file
from .onnx_served import INPUTS, encoder_features, refuse_dilated, use_kernel_backend
from .onnx_trace import export_graph

COMMAND = "export-onnx"
# The self-check's greedy search: long enough to show a drift, short enough to run at once.
CHECK_SETTINGS = GenerationSettings(beam=1, lenpen=1.0, no_repeat_ngram_size=0, min_len=8, max_len=24)


class EncoderGraph(nn.Module):
    """``(input_ids, attention_mask, global_attention_mask) -> last_hidden_state (B, S, C)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.encoder = model.encoder
        use_kernel_backend(self.encoder)

    def forward(self, input_ids, attention_mask, global_attention_mask):
        return encoder_features(self.encoder, input_ids, attention_mask, global_attention_mask)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``(B, T, C) -> (B, H, T, C / H)``."""
    return x.unflatten(-1, (heads, -1)).transpose(1, 2)


def _attend(attention, query, keys, values, bias) -> torch.Tensor:
    """fairseq ``MultiheadAttention``'s arithmetic on given keys and values ``(B, H, S, D)``;
    ``bias`` broadcasts over ``(B, H, T, S)``. Returns ``(B, T, C)`` after ``out_proj``."""
    q = _heads(attention.q_proj(query) * attention.scaling, attention.num_heads)
    weights = torch.softmax((q @ keys.transpose(-1, -2) + bias).float(), dim=-1).to(q.dtype)
    return attention.out_proj((weights @ values).transpose(1, 2).flatten(2))


def refuse_unusual_decoder(decoder) -> None:
    """The decoder must be BART's (what LED keeps): learned positions, plain layers."""
    problems = []
    if not isinstance(decoder.embed_positions, LearnedPositionalEmbedding):
        problems.append("positions that are not learned")
    if decoder.project_in_dim is not None or decoder.project_out_dim is not None:
        problems.append("projections around the layers")
    for layer in decoder.layers:
        if layer.cross_self_attention or any(
            getattr(layer, name, None) is not None for name in ("attn_ln", "c_attn", "ffn_layernorm", "w_resid")
        ):
            problems.append("NormFormer or cross-self-attention layers")
            break
    if problems:
        raise OnnxExportError(
            f"checkpoint: its decoder has {', '.join(problems)}, which the ONNX decoder does not write"
        )


class DecoderGraph(nn.Module):
    """fairseq's BART decoder for one call, its caches as tensors.

    Without past (``decoder_model``): ``(input_ids (B, T), encoder_hidden_states (B, S, C),
    encoder_attention_mask (B, S))`` -> ``logits (B, T, V)``, then per layer the decoder's
    and the encoder's keys and values. With past: ``(input_ids (B, 1),
    encoder_attention_mask, caches)`` -> ``logits``, then per layer the decoder's keys and
    values grown by one.
    """

    def __init__(self, model: nn.Module, with_past: bool):
        super().__init__()
        self.decoder, self.with_past = model.decoder, with_past
        refuse_unusual_decoder(self.decoder)

    def forward(self, input_ids, encoder_states_or_mask, *rest):
        decoder = self.decoder
        if self.with_past:
            encoder_mask, past = encoder_states_or_mask, rest
            done = past[0].shape[2]
        else:
            (encoder_mask,), past, done = rest, (), 0
        length = input_ids.shape[1]
        # fairseq numbers a target's positions from padding_idx + 1 (no padding in a search).
        positions = torch.arange(length, device=input_ids.device) + (done + decoder.padding_idx + 1)
        x = decoder.embed_scale * decoder.embed_tokens(input_ids)
        x = x + F.embedding(positions, decoder.embed_positions.weight).unsqueeze(0)
        if decoder.layernorm_embedding is not None:
            x = decoder.layernorm_embedding(x)
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        self_bias = torch.zeros(length, length, dtype=x.dtype, device=x.device).masked_fill(future, float("-inf"))
        if self.with_past:
            self_bias = torch.cat([self_bias.new_zeros(length, done), self_bias], dim=1)
        cross_bias = torch.zeros(encoder_mask.shape, dtype=x.dtype, device=x.device)
        cross_bias = cross_bias.masked_fill(encoder_mask == 0, float("-inf"))[:, None, None, :]
        presents = []
        for i, layer in enumerate(decoder.layers):
            before = layer.normalize_before  # pre- or post-layernorm, as the layer was built
            h = layer.self_attn_layer_norm(x) if before else x
            keys = _heads(layer.self_attn.k_proj(h), layer.self_attn.num_heads)
            values = _heads(layer.self_attn.v_proj(h), layer.self_attn.num_heads)
            if self.with_past:
                keys = torch.cat([past[4 * i], keys], dim=2)
                values = torch.cat([past[4 * i + 1], values], dim=2)
                cross_keys, cross_values = past[4 * i + 2], past[4 * i + 3]
                presents += [keys, values]
            else:
                states = encoder_states_or_mask
                cross_keys = _heads(layer.encoder_attn.k_proj(states), layer.encoder_attn.num_heads)
                cross_values = _heads(layer.encoder_attn.v_proj(states), layer.encoder_attn.num_heads)
                presents += [keys, values, cross_keys, cross_values]
            x = x + _attend(layer.self_attn, h, keys, values, self_bias)
            x = x if before else layer.self_attn_layer_norm(x)
            h = layer.encoder_attn_layer_norm(x) if before else x
            x = x + _attend(layer.encoder_attn, h, cross_keys, cross_values, cross_bias)
            x = x if before else layer.encoder_attn_layer_norm(x)
            h = layer.final_layer_norm(x) if before else x
            x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
            x = x if before else layer.final_layer_norm(x)
        if decoder.layer_norm is not None:
            x = decoder.layer_norm(x)
        return (decoder.output_layer(x), *presents)


def _export(graph: nn.Module, args: tuple, input_names: list[str], output_names: list[str], dynamic_shapes, path: Path,
            opset: int) -> None:  # fmt: skip
    export_graph(graph, args, input_names, output_names, dynamic_shapes, opset).save(str(path))


def trace_led(model: nn.Module, out_dir: Path, max_source: int, opset: int) -> None:
    """Write the three files of ``model`` into ``out_dir``."""
    batch = torch.export.Dim("batch", min=1, max=4096)
    source = torch.export.Dim("source", min=1, max=max_source)
    target = torch.export.Dim("target", min=1, max=model.decoder.max_positions())
    done = torch.export.Dim("past", min=1, max=model.decoder.max_positions())
    layers, heads = len(model.decoder.layers), model.decoder.layers[0].self_attn.num_heads
    width = model.decoder.embed_tokens.embedding_dim
    ids = torch.full((2, 5), 7, dtype=torch.long)
    ids[:, 0] = BOS
    ones = torch.ones(2, 5, dtype=torch.long)
    _export(EncoderGraph(model), (ids, ones, torch.zeros_like(ids)), list(INPUTS), ["last_hidden_state"],
            {name: {0: batch, 1: source} for name in INPUTS}, out_dir / ENCODER_FILE, opset)  # fmt: skip
    states = torch.randn(2, 5, width)
    tokens = torch.full((2, 3), EOS, dtype=torch.long)
    first_shapes = ({0: batch, 1: target}, {0: batch, 1: source}, ({0: batch, 1: source},))  # *rest: a tuple
    _export(DecoderGraph(model, with_past=False), (tokens, states, ones),
            ["input_ids", "encoder_hidden_states", "encoder_attention_mask"],
            ["logits", *cache_names(layers, "present")], first_shapes, out_dir / DECODER_FILE, opset)  # fmt: skip
    head_dim = width // heads
    past = tuple(torch.randn(2, heads, 3 if kind == "decoder" else 5, head_dim)
                 for _ in range(layers) for kind in ("decoder", "encoder") for _kv in range(2))  # fmt: skip
    past_shapes = tuple({0: batch, 2: done if i % 4 < 2 else source} for i in range(len(past)))
    _export(DecoderGraph(model, with_past=True), (tokens[:, :1], ones, *past),
            ["input_ids", "encoder_attention_mask", *cache_names(layers, "past_key_values")],
            ["logits", *cache_names(layers, "present", ("decoder",))],
            ({0: batch}, {0: batch, 1: source}, past_shapes), out_dir / DECODER_WITH_PAST_FILE, opset)  # fmt: skip


def generation_config(model: nn.Module, settings: GenerationSettings) -> dict:
    """What the served summarizer reads: special ids, positions, ``summarize``'s beam settings."""
    return {
        "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD, "unk_token_id": UNK,
        "decoder_start_token_id": EOS,  # fairseq's decoder starts from </s>
        "max_source_positions": model.max_positions()[0],
        "max_target_positions": model.decoder.max_positions(),
        "decoder_layers": len(model.decoder.layers),
        **{key: getattr(settings, name) for name, key in CONFIG_KEYS.items()},
    }  # fmt: skip


def check_sources(model: nn.Module, task, windows: list[int]) -> list[list[int]]:
    """Random ``<s> ... </s>`` sources: past the widest window and not a multiple of it, and longer."""
    w, positions = max(windows), model.max_positions()[0]
    generator = np.random.default_rng(0)
    dictionary = task.source_dictionary
    return [[BOS, *generator.integers(dictionary.nspecial, len(dictionary), size=n - 2).tolist(), EOS]
            for n in sorted({min(n, positions) for n in (2 * w + 3, 6 * w + 7)})]  # fmt: skip


def self_check(served: OnnxSummarizer, model: nn.Module, task, sources: list[list[int]]) -> dict:
    """onnxruntime's greedy search against fairseq's on ``sources``.

    Raises:
        ValueError: a token that differs, with where.
    """
    checked = []
    for source in sources:
        theirs = generate(model, task, [torch.tensor(source)], CHECK_SETTINGS)[0]
        ours = served.generate(source, CHECK_SETTINGS)
        if ours != theirs:
            raise OnnxExportError(
                f"self-check: onnxruntime's greedy summary of a {len(source)}-token source differs from PyTorch's "
                f"({ours[:12]} against {theirs[:12]}); nothing written"
            )
        checked.append({"source_tokens": len(source), "summary_tokens": len(ours)})
    return {"greedy": checked, "equal": True}


def greedy_agreement(reference: OnnxSummarizer, quantized: OnnxSummarizer, sources: list[list[int]]) -> dict:
    """The share of greedy summary tokens the quantized files choose as the float32 ones do
    (position by position; a summary's extra or missing tokens disagree)."""
    same = total = 0
    for source in sources:
        want, got = (s.generate(source, CHECK_SETTINGS) for s in (reference, quantized))
        same += sum(a == b for a, b in zip(want, got, strict=False))
        total += max(len(want), len(got))
    return {"greedy_tokens": round(same / max(1, total), 4)}


class LedPlan:
    """An ``led`` checkpoint as the three files of :mod:`this module <.onnx_led>`, with its
    tokenizer and generation settings, in a directory (for :func:`.onnx.export_onnx`)."""

    WHAT = "an LED"
    DTYPES = ("float32",)
    FILES = (ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE)

    def __init__(self, checkpoint: Checkpoint, dtype: str = "float32", tokenizer: Path | None = None):
        self.checkpoint, self.tokenizer = checkpoint, tokenizer
        self.model, self.task = checkpoint.load("cpu")
        refuse_dilated(self.model.encoder, checkpoint.path)
        refuse_unusual_decoder(self.model.decoder)
        self.sources: list[list[int]] = []
        self.served: OnnxSummarizer | None = None  # the float32 files, as the self-check ran them

    @staticmethod
    def staged(out: Path, report: dict, force: bool):
        """The directory is staged beside ``out``, its record ``export-onnx.json`` (the report)
        written last: a rerun from the same checkpoint refreshes it."""
        return guarded_output(out, COMMAND, report, force)

    def describe(self) -> dict:
        return {"head": "summarizer", "files": [*self.FILES, "tokenizer.json", GENERATION_CONFIG],
                "max_length": self.model.max_positions()[0]}  # fmt: skip

    def write(self, target: Path, opset: int, sources: dict) -> dict:
        checkpoint = self.checkpoint
        source = Path(self.tokenizer) if self.tokenizer is not None else checkpoint.path.parent
        try:
            tokenizer = write_hf_tokenizer(source, checkpoint.dictionary(), target)
        except TokenizerError as err:
            if self.tokenizer is not None:
                raise OnnxExportError(str(err)) from None
            raise OnnxExportError(
                f"--tokenizer: no tokenizer beside {checkpoint.path} (import-hf leaves one there); give an HF "
                "tokenizer directory, or the directory of BART's encoder.json and vocab.bpe"
            ) from None
        settings = generation_config(self.model, GenerationSettings())
        (target / GENERATION_CONFIG).write_text(json.dumps(settings, indent=2))
        trace_led(self.model, target, self.model.max_positions()[0], opset)
        return {"tokenizer": tokenizer}

    def self_check(self, target: Path) -> dict:
        windows = [a.window for a in self.model.encoder.attention_modules()]
        self.sources = check_sources(self.model, self.task, windows)
        self.served = OnnxSummarizer(target)
        return self_check(self.served, self.model, self.task, self.sources)

    def quantize(self, target: Path) -> dict:
        """The int8 files' greedy tokens against the float32 ones' (the self-check's sessions),
        on the self-check's sources."""
        for name in self.FILES:
            quantize_file(target / name)
        return greedy_agreement(self.served, OnnxSummarizer(target), self.sources)
