"""The reader of a released model in HF transformers' layout.

:func:`read_hf_release` reads a hub directory (:mod:`.hf_directory`, :mod:`longformer_fs.hf_format.tokenizer_files`)
of one of the RoBERTa and BART families and lays it out as fairseq would have trained it,
a :class:`~.released.ReleasedModel`:

- ``longformer`` -> ``longformer_roberta``, with the head our tasks read: the masked-LM
  head, the QA span head (``longformer_qa``'s token head ``qa``) or the sequence
  classification head (``sentence_prediction``'s ``sentence_classification_head``). A head
  no task here has (multiple choice, token classification) is left out, and so is the
  pooler; the report names them;
- ``led`` -> ``led``;
- ``roberta`` (and ``xlm-roberta``, RoBERTa's architecture with XLM-R's SentencePiece
  tokenizer) and ``bart`` -> fairseq's own ``roberta`` and ``bart``, which is what
  ``convert-roberta`` and ``convert-bart`` start from.

The layouts differ in more than names in three places: HF's token-type embedding (one
row used, RoBERTa has no types) is folded into the position table; HF's LED numbers
positions from 0 where fairseq keeps ``padding_idx + 1`` reserved rows (BART and
Longformer keep them on both sides); and HF's ``attention_window`` is the whole window
where ours is one side. A setting our models cannot express is an error that names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..conventions import BOS, EOS, PAD, SOURCE, TARGET
from ..heads import QA_HEAD, Head
from ..hf_format import weight_names
from ..hf_format.token_ids import check_tokenizer, dictionary_lines
from ..hf_format.tokenizer_files import ByteLevelBPE, SentencePieceVocab, read_tokenizer
from ..models import led as led_layout
from ..models import longformer_roberta as roberta_layout
from ..models.weight_layout import reserved_position_rows
from ..output import sources
from .hf_directory import HFDirectoryError, HFModelDirectory, read_config, read_weights
from .released import NotConvertibleError, ReleasedModel, training_config

ENCODERS = ("longformer", "roberta", "xlm-roberta", "camembert")
# Where a model type keeps its encoder's weights when it is not under its own name.
WEIGHT_PREFIX = {"xlm-roberta": "roberta.", "camembert": "roberta."}
# HF's activation name -> fairseq's. HF's tanh-approximated GELUs are fairseq's gelu_accurate.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}
ACTIVATIONS |= dict.fromkeys(("gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate"), "gelu_accurate")
FAIRSEQ_LAYER_NORM_EPS = 1e-5
CLASSIFICATION_HEAD = "sentence_classification_head"  # sentence_prediction's default head name


class UnsupportedModelError(NotConvertibleError):
    """The directory holds a model, or a setting, that our models cannot express."""


def task_arguments(head: Head | None, settings: dict, weights: dict) -> list[str]:
    """The fairseq-train arguments of the task and criterion that train ``head`` (None: a
    bare encoder, trained as a masked LM)."""
    kind = head.kind if head else "masked_lm"
    if kind == "summarizer":
        return ["--task", "translation", "--source-lang", SOURCE, "--target-lang", TARGET,
                "--criterion", "label_smoothed_cross_entropy",
                "--max-source-positions", str(settings["max_source_positions"]),
                "--max-target-positions", str(settings["max_target_positions"])]  # fmt: skip
    positions = str(settings["max_positions"])
    if kind == "qa":
        return ["--task", "longformer_qa", "--criterion", "longformer_qa", "--max-positions", positions]
    if kind == "classification":
        classes = weights[f"classification_heads.{CLASSIFICATION_HEAD}.out_proj.bias"].numel()
        return ["--task", "sentence_prediction", "--criterion", "sentence_prediction", "--num-classes",
                str(classes), "--init-token", str(BOS), "--separator-token", str(EOS),
                "--max-positions", positions]  # fmt: skip
    return ["--task", "masked_lm", "--criterion", "masked_lm", "--tokens-per-sample", positions]


def _released(directory: HFModelDirectory, tokenizer, arch: str, weights: dict, settings: dict, head: Head | None,
              rows: int, left_out: list[str], notes: list[str]) -> ReleasedModel:  # fmt: skip
    """The release as fairseq would have trained it: the config a training run of ``arch``
    with ``settings`` records (its data directory: the HF directory until written)."""
    arguments = [str(directory.path.resolve()), *task_arguments(head, settings, weights)]
    sizes = [k for k in ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_embed_dim",
                         "encoder_ffn_embed_dim", "decoder_ffn_embed_dim") if k in settings]  # fmt: skip
    for key in sizes:  # as flags too: the architecture derives other sizes from them
        arguments += ["--" + key.replace("_", "-"), str(settings[key])]
    cfg = training_config(["--arch", arch, *arguments], settings)
    return ReleasedModel(directory.path, cfg, weights, dictionary_lines(tokenizer, rows), tokenizer,
                         sources(*directory.files), directory.model_type, head, left_out, notes)  # fmt: skip


# ---------------------------------------------------------------- reading config.json


class _Config:
    """``config.json`` read setting by setting, each problem an error that names it."""

    def __init__(self, directory: Path, values: dict):
        self.path, self.values = Path(directory) / "config.json", values

    def get(self, key: str, default=None):
        value = self.values.get(key)
        return default if value is None else value

    def require(self, key: str):
        if self.values.get(key) is None:
            raise UnsupportedModelError(f"{self.path}: no {key}")
        return self.values[key]

    def unsupported(self, key: str, why: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{self.path}: {key} = {json.dumps(self.values.get(key))}: {why}")

    def expect(self, key: str, expected, why: str, default=None) -> None:
        if self.get(key, default) != expected:
            raise self.unsupported(key, why)

    def special_ids(self, bos: int = BOS, eos: int = EOS) -> None:
        """HF's ids of ``<pad> <s> </s>``: fairseq's, or (CamemBERT) those its tokenizer gives."""
        for key, expected in (("pad_token_id", PAD), ("bos_token_id", bos), ("eos_token_id", eos)):
            self.expect(key, expected, f"the tokenizer has <s>={bos} <pad>={PAD} </s>={eos}", expected)

    def activation(self, key: str) -> str:
        value = self.get(key, "gelu")
        if value not in ACTIVATIONS:
            raise self.unsupported(key, f"not one of fairseq's activations ({', '.join(sorted(ACTIVATIONS))})")
        return ACTIVATIONS[value]

    def windows(self, key: str, layers: int) -> list[int]:
        """HF's whole windows, one per layer, as our one-sided ones."""
        value = self.require(key)
        windows = [value] * layers if isinstance(value, int) else list(value)
        if len(windows) != layers:
            raise self.unsupported(key, f"{len(windows)} windows for {layers} layers")
        if any(not isinstance(w, int) or w < 2 or w % 2 for w in windows):
            raise self.unsupported(key, "a window must be an even number >= 2 (both sides; ours is one side)")
        return [w // 2 for w in windows]


def _per_layer(values: list[int]) -> str:
    """``"w"`` when every layer has ``w``, else ``"w0,w1,..."`` (``--attention-window`` syntax)."""
    return str(values[0]) if len(set(values)) == 1 else ",".join(map(str, values))


class _Weights:
    """The HF state dict, taken tensor by tensor; what is never taken is left over."""

    def __init__(self, directory: HFModelDirectory):
        self.tensors, self.taken = directory.weights, set()
        self.files = " / ".join(str(f) for f in directory.weight_files)

    def take(self, key: str) -> torch.Tensor:
        if key not in self.tensors:
            raise HFDirectoryError(f"{self.files}: no tensor {key!r}, which config.json's model has")
        self.taken.add(key)
        return self.tensors[key]

    def optional(self, key: str) -> torch.Tensor | None:
        return self.take(key) if key in self.tensors else None

    def prefix(self, candidates: tuple[str, ...], probe: str) -> str:
        """The prefix (``"longformer."``, ``""`` ...) under which ``probe`` is stored."""
        found = next((p for p in candidates if p + probe in self.tensors), None)
        if found is None:
            raise HFDirectoryError(f"{self.files}: no tensor {probe!r} under any of {list(candidates)}")
        return found

    def map(self, names: dict[str, str]) -> dict:
        return {fs: self.take(hf) for fs, hf in names.items()}

    def left(self) -> list[str]:
        # position_ids: a buffer older checkpoints saved, derived from the config.
        return [k for k in self.tensors if k not in self.taken and not k.endswith("position_ids")]


# ---------------------------------------------------------------- encoders: Longformer, RoBERTa


def _encoder(directory: HFModelDirectory, tokenizer: ByteLevelBPE | SentencePieceVocab) -> ReleasedModel:
    config, weights = _Config(directory.path, directory.config), _Weights(directory)
    kind = directory.model_type
    bos, eos = tokenizer.hf_bos_eos if isinstance(tokenizer, SentencePieceVocab) else (BOS, EOS)
    config.special_ids(bos, eos)
    if abs(float(config.get("layer_norm_eps", 1e-12)) - FAIRSEQ_LAYER_NORM_EPS) > 1e-9:
        raise config.unsupported("layer_norm_eps", f"fairseq's layer norms use {FAIRSEQ_LAYER_NORM_EPS}")
    config.expect("position_embedding_type", "absolute", "fairseq's RoBERTa learns absolute positions", "absolute")
    for key in ("is_decoder", "add_cross_attention"):
        config.expect(key, False, "an encoder-only model is expected", False)
    layers = int(config.require("num_hidden_layers"))
    hidden, heads = int(config.require("hidden_size")), int(config.require("num_attention_heads"))
    prefix = weights.prefix((WEIGHT_PREFIX.get(kind, f"{kind}."), ""), weight_names.WORD_EMBEDDINGS)
    longformer = kind == "longformer"

    state = weights.map(weight_names.bert_encoder(layers, prefix, global_projections=longformer))
    tokens = state[roberta_layout.TOKEN_EMBEDDINGS] = weights.take(prefix + weight_names.WORD_EMBEDDINGS)
    positions = weights.take(prefix + weight_names.POSITION_EMBEDDINGS)
    types = weights.optional(prefix + weight_names.TOKEN_TYPE_EMBEDDINGS)
    notes = []
    if types is not None:  # every token is type 0: its row is a constant added with the positions
        positions = positions + types[0]
        notes.append(f"token types: type 0's row folded into the positions ({types.shape[0] - 1} other rows unused)")
    state[roberta_layout.POSITIONS] = positions
    state[roberta_layout.SENTENCE_ENCODER + "version"] = torch.tensor([3.0])  # fairseq's Transformer layout version
    max_positions = positions.shape[0] - reserved_position_rows(PAD)
    if int(config.require("max_position_embeddings")) != positions.shape[0] or max_positions < 1:
        raise config.unsupported("max_position_embeddings", f"the weights hold {positions.shape[0]} rows")
    settings = {
        "encoder_layers": layers,
        "encoder_embed_dim": hidden,
        "encoder_ffn_embed_dim": int(config.require("intermediate_size")),
        "encoder_attention_heads": heads,
        "activation_fn": config.activation("hidden_act"),
        "dropout": float(config.get("hidden_dropout_prob", 0.1)),
        "attention_dropout": float(config.get("attention_probs_dropout_prob", 0.1)),
        "activation_dropout": 0.0,
        "pooler_dropout": float(config.get("classifier_dropout", config.get("hidden_dropout_prob", 0.1))),
        "pooler_activation_fn": "tanh",
        "max_positions": max_positions,
        "max_source_positions": max_positions,
        "encoder_normalize_before": False,
        "layernorm_embedding": True,
        "no_scale_embedding": True,
        "encoder_learned_pos": True,
        "untie_weights_roberta": False,
        "encoder_layerdrop": 0.0,
    }
    if longformer:
        settings |= _longformer_attention(config, layers)
    head, left_out = _encoder_head(config, weights, state, settings, tokens)
    if (bos, eos) != (BOS, EOS):
        _copy_rows(state, {BOS: bos, EOS: eos})
        notes.append(f"<s> and </s>: fairseq's ids {BOS} and {EOS} take the rows of HF's {bos} and {eos}")
    left_out += [f"{key} (not in config.json's model)" for key in weights.left()]
    large = hidden >= 1024
    arch = (f"longformer_roberta_{'large' if large else 'base'}" if longformer
            else f"roberta_{'large' if large else 'base'}")  # fmt: skip
    return _released(directory, tokenizer, arch, state, settings, head, tokens.shape[0], left_out, notes)


def _copy_rows(state: dict, rows: dict[int, int]) -> None:
    """Each token row ``to`` of the embeddings and the masked-LM head becomes a copy of row
    ``rows[to]``: fairseq's tasks put ``<s>`` and ``</s>`` at 0 and 2, where CamemBERT's
    tokenizer gives 5 and 6 (its 0 and 2 are never given). Tied tensors stay tied."""
    copies = {}
    for key in (roberta_layout.TOKEN_EMBEDDINGS, roberta_layout.LM_HEAD + "weight", roberta_layout.LM_HEAD + "bias"):
        tensor = state[key]
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.clone()
            for to, origin in rows.items():
                copies[id(tensor)][to] = tensor[origin]
        state[key] = copies[id(tensor)]


def _longformer_attention(config: _Config, layers: int) -> dict:
    """Windows, and what allenai's own configs add: dilation, autoregressive, the mode."""
    mode = config.get("attention_mode", "longformer")
    if mode not in ("longformer", "sliding_chunks", "tvm"):
        raise config.unsupported("attention_mode", "only sliding windows (longformer, sliding_chunks, tvm) map here")
    dilation = config.get("attention_dilation", 1)
    dilations = [dilation] * layers if isinstance(dilation, int) else list(dilation)
    if len(dilations) != layers or any(not isinstance(d, int) or d < 1 for d in dilations):
        raise config.unsupported("attention_dilation", f"expected one dilation >= 1 for each of {layers} layers")
    return {
        "attention_window": _per_layer(config.windows("attention_window", layers)),
        "attention_dilation": _per_layer(dilations),
        "causal_attention": bool(config.get("autoregressive", False)),
        "global_attention_tokens": "",
    }


def _encoder_head(config, weights: _Weights, state: dict, settings: dict, tokens: torch.Tensor):
    """The head the weights hold, put where fairseq's model keeps it; a fresh masked-LM
    head where there is none (fairseq's RoBERTa always has one; fine-tuning never reads
    it). Returns the head (None for a bare encoder, whose masked-LM head is fresh) and what
    was left out."""
    tensors, left_out = weights.tensors, []
    if "lm_head.dense.weight" in tensors:
        state.update(weights.map(weight_names.LM_HEAD))
        decoder = weights.optional(weight_names.LM_HEAD_DECODER)
        weights.optional("lm_head.decoder.bias")  # HF ties it to lm_head.bias
        if decoder is not None and not torch.equal(decoder, tokens):
            settings["untie_weights_roberta"] = True
        state[roberta_layout.LM_HEAD + "weight"] = tokens if decoder is None else decoder
        head = Head("masked_lm")
    else:
        state.update(_fresh_lm_head(tokens))
        head = None
    if "qa_outputs.weight" in tensors:
        # A QA head scores each token as a start and as an end; with other outputs, the
        # longformer_qa task could not load the model it names.
        outputs = tensors["qa_outputs.weight"].shape[0]
        if outputs != 2:
            raise config.unsupported("num_labels", f"a QA head has 2 outputs (start, end), this one {outputs}")
        for p in weight_names.PARAMS:
            state[f"token_heads.{QA_HEAD}.{p}"] = weights.take(f"qa_outputs.{p}")
        settings["global_attention_from_data"] = True
        head = Head("qa", QA_HEAD)
    elif "classifier.dense.weight" in tensors and "classifier.out_proj.weight" in tensors:
        for module in ("dense", "out_proj"):
            for p in weight_names.PARAMS:
                state[f"classification_heads.{CLASSIFICATION_HEAD}.{module}.{p}"] = weights.take(
                    f"classifier.{module}.{p}"
                )
        settings["global_attention_tokens"] = "<s>"  # HF's classifier makes the first token global
        head = Head("classification", CLASSIFICATION_HEAD)
    elif "classifier.weight" in tensors:
        kinds = " ".join(config.get("architectures", []))
        what = (
            "multiple-choice" if "MultipleChoice" in kinds else "token-classification" if "Token" in kinds else "task"
        )
        for p in weight_names.PARAMS:
            weights.optional(f"classifier.{p}")
        left_out.append(f"the {what} head (classifier): no task here has one")
    pooler = [k for k in tensors if ".pooler." in f".{k}"]
    for key in pooler:
        weights.taken.add(key)
    if pooler:
        left_out.append("the pooler: RoBERTa's heads pool the first token themselves")
    return head, left_out


def _fresh_lm_head(tokens: torch.Tensor) -> dict:
    """A masked-LM head as fairseq's RoBERTa initialises one (BERT's N(0, 0.02), fixed
    seed), tied to the token embeddings."""
    hidden = tokens.shape[1]
    generator = torch.Generator().manual_seed(0)
    prefix = roberta_layout.LM_HEAD
    return {
        prefix + "dense.weight": (torch.randn(hidden, hidden, generator=generator) * 0.02).to(tokens.dtype),
        prefix + "dense.bias": tokens.new_zeros(hidden),
        prefix + "layer_norm.weight": tokens.new_ones(hidden),
        prefix + "layer_norm.bias": tokens.new_zeros(hidden),
        prefix + "weight": tokens,
        prefix + "bias": tokens.new_zeros(tokens.shape[0]),
    }


# ---------------------------------------------------------------- encoder-decoders: LED, BART


def _encoder_decoder(directory: HFModelDirectory, tokenizer: ByteLevelBPE | SentencePieceVocab) -> ReleasedModel:
    config, weights = _Config(directory.path, directory.config), _Weights(directory)
    kind = directory.model_type
    led = kind == "led"
    config.special_ids()
    config.expect("decoder_start_token_id", EOS, f"fairseq's decoder starts from </s> ({EOS})", EOS)
    if not led:
        config.expect("normalize_before", False, "BART's layers are post-layernorm", False)
        config.expect("add_final_layer_norm", False, "BART has no final layer norm", False)
    encoder_layers, decoder_layers = int(config.require("encoder_layers")), int(config.require("decoder_layers"))
    width = int(config.require("d_model"))
    prefix = weights.prefix(("led.", "model.", ""), weight_names.SHARED_EMBEDDINGS)

    state = weights.map(weight_names.encoder_decoder(encoder_layers, decoder_layers, prefix, longformer=led))
    tokens = weights.take(prefix + weight_names.SHARED_EMBEDDINGS)
    for key in (
        f"{prefix}encoder.embed_tokens.weight",
        f"{prefix}decoder.embed_tokens.weight",
        weight_names.LM_HEAD_WEIGHT,
    ):
        tied = weights.optional(key)
        if tied is not None and not torch.equal(tied, tokens):
            raise UnsupportedModelError(
                f"{weights.files}: {key} differs from the shared embeddings; fairseq's BART shares them all"
            )
    bias = weights.optional(weight_names.FINAL_LOGITS_BIAS)
    if bias is not None and bool(bias.any()):
        raise UnsupportedModelError(
            f"{weights.files}: {weight_names.FINAL_LOGITS_BIAS} is not zero; fairseq's BART has no output bias"
        )
    for key in (led_layout.TOKEN_EMBEDDINGS, "decoder.embed_tokens.weight", "decoder.output_projection.weight"):
        state[key] = tokens
    # fairseq keeps padding_idx + 1 reserved rows before the learned positions; HF's BART
    # does too (its offset of 2), HF's LED does not.
    missing = reserved_position_rows(PAD) if led else 0
    positions = {}
    for side, key in (("encoder", led_layout.ENCODER_POSITIONS), ("decoder", led_layout.DECODER_POSITIONS)):
        table = weights.take(f"{prefix}{side}.embed_positions.weight")
        state[key] = torch.cat([table.new_zeros(missing, width), table]) if missing else table
        positions[side] = state[key].shape[0] - reserved_position_rows(PAD)
        state[f"{side}.version"] = torch.tensor([3.0])  # fairseq's Transformer layout version
    if led:
        expected = (
            config.require("max_encoder_position_embeddings"),
            config.require("max_decoder_position_embeddings"),
        )
    else:
        expected = (config.require("max_position_embeddings"),) * 2
    if tuple(positions.values()) != tuple(int(e) for e in expected):
        raise UnsupportedModelError(
            f"{config.path}: {list(expected)} positions, but the weights hold {list(positions.values())}"
        )
    settings = {
        "encoder_layers": encoder_layers,
        "decoder_layers": decoder_layers,
        "encoder_embed_dim": width,
        "decoder_embed_dim": width,
        "decoder_output_dim": width,
        "decoder_input_dim": width,
        "encoder_ffn_embed_dim": int(config.require("encoder_ffn_dim")),
        "decoder_ffn_embed_dim": int(config.require("decoder_ffn_dim")),
        "encoder_attention_heads": int(config.require("encoder_attention_heads")),
        "decoder_attention_heads": int(config.require("decoder_attention_heads")),
        "activation_fn": config.activation("activation_function"),
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        "activation_dropout": float(config.get("activation_dropout", 0.0)),
        "relu_dropout": float(config.get("activation_dropout", 0.0)),
        "max_source_positions": positions["encoder"],
        "max_target_positions": positions["decoder"],
        "share_all_embeddings": True,
        "share_decoder_input_output_embed": True,
        "no_scale_embedding": not config.get("scale_embedding", False),
        "layernorm_embedding": True,
        "encoder_normalize_before": False,
        "decoder_normalize_before": False,
        "encoder_learned_pos": True,
        "decoder_learned_pos": True,
    }
    if led:
        settings["attention_window"] = _per_layer(config.windows("attention_window", encoder_layers))
    large = width >= 1024
    arch = f"{'led' if led else 'bart'}_{'large' if large else 'base'}"
    left_out = [f"{key} (not in config.json's model)" for key in weights.left()]
    return _released(directory, tokenizer, arch, state, settings, Head("summarizer"), tokens.shape[0], left_out, [])


# ---------------------------------------------------------------- reading


def read_hf_release(path: Path, accept: tuple[str, ...], what: str, tokenizer: Path | None = None) -> ReleasedModel:
    """The HF model directory at ``path`` as a :class:`~.released.ReleasedModel`.

    Args:
        accept: the model types (``config.json``'s ``model_type``) the caller takes.
        tokenizer: the directory of the tokenizer files, when not ``path``.
        what: the caller's name, for the error on another model type.

    Raises:
        NotConvertibleError: another model type, a setting our models cannot express, a
            missing or unreadable file, a tokenizer that is not the model's. Each names
            the file; nothing is read past the first problem (a BERT's weights never are).
    """
    path = Path(path)
    config = read_config(path)
    kind = config.get("model_type")
    if kind not in accept:
        hint = {
            "roberta": "; a RoBERTa becomes a Longformer with `longformer-fs convert-roberta`",
            "xlm-roberta": "; an XLM-R becomes a Longformer with `longformer-fs convert-roberta`",
            "camembert": "; a CamemBERT becomes a Longformer with `longformer-fs convert-roberta`",
            "bart": "; a BART becomes an LED with `longformer-fs convert-bart`",
            "longformer": "; `longformer-fs import-hf` takes it",
            "led": "; `longformer-fs import-hf` takes it",
        }.get(kind, "")
        raise UnsupportedModelError(
            f"{path / 'config.json'}: model_type {kind!r} is not one {what} takes ({', '.join(accept)}){hint}"
        )
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        raise UnsupportedModelError(f"{path / 'config.json'}: no vocab_size")
    bpe = read_tokenizer(Path(tokenizer) if tokenizer else path)
    check_tokenizer(bpe, vocab, mask=kind in ENCODERS)  # before the weights are read: the cheap check first
    weights, files = read_weights(path)
    directory = HFModelDirectory(path, config, weights, files)
    model = (_encoder if kind in ENCODERS else _encoder_decoder)(directory, bpe)
    if model.rows != vocab:
        raise UnsupportedModelError(
            f"{path / 'config.json'}: vocab_size {vocab}, but the weights hold {model.rows} rows"
        )
    return model
