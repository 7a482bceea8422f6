"""Export checkpoints to HF transformers: ``longformer_roberta`` here, ``led`` as
``LEDForConditionalGeneration`` (:mod:`.hf_led`).

A ``longformer_roberta`` checkpoint becomes the HF class of its head: the masked-LM head
-> ``LongformerForMaskedLM``; one sentence-classification head (fine-tuned with
``sentence_prediction``) -> ``LongformerForSequenceClassification``, whose head is the same
dense-tanh-projection of the first token; the ``qa`` token head (``longformer_qa``) ->
``LongformerForQuestionAnswering``; another token head (``longformer_wikihop``'s
``candidate``) -> ``LongformerForTokenClassification``, a linear map of every token too.

The two models are the same network under different names: fairseq's RoBERTa layers
are post-layernorm BERT layers, both number positions from ``padding_idx + 1``, and
HF's Longformer attention has our semantics for undilated, bidirectional windows (HF's
``attention_window`` is the total, ``2w``). Dilation and causal attention have no HF
counterpart, so such models are refused.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
import transformers
from transformers import LongformerConfig

from ..checkpoint import Checkpoint, Kind
from ..conventions import BOS, EOS, PAD
from ..heads import CLASSIFICATION_HEADS, TOKEN_HEADS, Head
from ..hf_format import weight_names
from ..hf_format.token_ids import dictionary_layout
from ..hf_format.tokenizer_files import CAMEMBERT_BOS_EOS
from ..hf_format.tokenizer_out import write_hf_tokenizer
from ..models import longformer_roberta as layout
from ..modules.per_layer import layer_values
from ..output import guarded_output, sources
from .errors import ExportError
from .hf_led import export_led


def check_exportable(args, layers: int) -> list[int]:
    """The per-layer one-sided windows, or :class:`ExportError` for what HF cannot run."""
    if getattr(args, "causal_attention", False):
        raise ExportError("checkpoint: causal attention has no HF Longformer counterpart; export refused")
    dilations = layer_values(getattr(args, "attention_dilation", "1") or "1", layers, "attention dilation")
    if any(d != 1 for d in dilations):
        raise ExportError(
            f"checkpoint: dilated attention ({list(dilations)}) has no HF Longformer counterpart "
            "(HF runs dilation 1 only); export refused"
        )
    if getattr(args, "encoder_normalize_before", False):
        raise ExportError("checkpoint: pre-layernorm layers differ from HF Longformer's BERT layers; export refused")
    windows = layer_values(args.attention_window, layers, "attention window")
    if min(windows) < 1:
        raise ExportError("checkpoint: HF Longformer needs a window of at least 1 on each side")
    return list(windows)


def task_head(args, head: Head, state: dict) -> tuple[type, dict, dict]:
    """The HF class for ``head`` (:data:`~longformer_fs.heads.HEADS`), its weights under HF
    names, and config settings."""
    if head.spec.hf_class is None:
        raise ExportError(f"checkpoint: ends in {head.spec.what}; HF transformers has no such head, not exported")
    cls = getattr(transformers, head.spec.hf_class)
    if head.kind == "classification":
        prefix = f"{CLASSIFICATION_HEADS}{head.name}."
        if getattr(args, "pooler_activation_fn", "tanh") != "tanh":
            raise ExportError(
                f"checkpoint: classification head with {args.pooler_activation_fn}; HF's Longformer head is tanh"
            )
        weights = {
            f"classifier.{m}.{p}": state[f"{prefix}{m}.{p}"] for m in ("dense", "out_proj") for p in ("weight", "bias")
        }
        return cls, weights, {"num_labels": weights["classifier.out_proj.bias"].numel()}
    if head.kind in ("qa", "token"):
        name = "qa_outputs" if head.kind == "qa" else "classifier"
        weights = {f"{name}.{p}": state[f"{TOKEN_HEADS}{head.name}.{p}"] for p in ("weight", "bias")}
        return cls, weights, {"num_labels": weights[f"{name}.bias"].numel()}
    weights = {hf: state[fs] for fs, hf in weight_names.LM_HEAD.items()}
    weights[weight_names.LM_HEAD_DECODER] = state[layout.LM_HEAD + "weight"]
    weights["lm_head.decoder.bias"] = state[layout.LM_HEAD + "bias"]
    return cls, weights, {}


def hf_state_dict(state: dict, layers: int, head: dict) -> dict:
    """fairseq ``longformer_roberta`` weights under HF Longformer names, ``head`` (HF names) added."""
    prefix = "longformer."
    out = {hf: state[fs] for fs, hf in weight_names.bert_encoder(layers, prefix, global_projections=True).items()}
    out[prefix + weight_names.WORD_EMBEDDINGS] = state[layout.TOKEN_EMBEDDINGS]
    out[prefix + weight_names.POSITION_EMBEDDINGS] = state[layout.POSITIONS]
    # RoBERTa has no token types: one all-zero type embedding adds nothing.
    out[prefix + weight_names.TOKEN_TYPE_EMBEDDINGS] = torch.zeros(1, state[layout.TOKEN_EMBEDDINGS].shape[1])
    return {k: v.detach().clone().contiguous() for k, v in (out | head).items()}


def hf_config(args, state: dict, windows: list[int], **settings):
    vocab, hidden = state[layout.TOKEN_EMBEDDINGS].shape
    return LongformerConfig(
        **settings,
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=len(windows),
        num_attention_heads=args.encoder_attention_heads,
        intermediate_size=args.encoder_ffn_embed_dim,
        hidden_act="gelu" if args.activation_fn == "gelu" else args.activation_fn,
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.attention_dropout,
        max_position_embeddings=state[layout.POSITIONS].shape[0],
        type_vocab_size=1,
        layer_norm_eps=1e-5,  # fairseq's LayerNorm
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        sep_token_id=EOS,
        attention_window=[2 * w for w in windows],  # HF counts both sides
    )


def export_longformer(checkpoint: Checkpoint):
    """A ``longformer_roberta`` checkpoint (read, or :meth:`~.Checkpoint.in_memory`) as the
    HF Longformer class of its head: the model and a report."""
    args, weights = checkpoint.model_cfg, checkpoint.state["model"]
    layers = layout.encoder_layers(weights)
    windows = check_exportable(args, layers)
    cls, head, settings = task_head(args, checkpoint.head, weights)
    model = cls(hf_config(args, weights, windows, **settings))
    missing, unexpected = model.load_state_dict(hf_state_dict(weights, layers, head), strict=False)
    if unexpected or [k for k in missing if not k.endswith("position_ids")]:
        raise ExportError(
            f"checkpoint: weights do not map onto HF Longformer (missing {missing}, unexpected {unexpected})"
        )
    report = {
        "layers": layers,
        "attention_window_hf": [2 * w for w in windows],
        "vocab": weights[layout.TOKEN_EMBEDDINGS].shape[0],
        "model_class": cls.__name__,
    }
    return model, report


def _tokenizer_ids(model, dictionary: Path | None) -> list[str]:
    """Give ``<s>`` and ``</s>`` the ids HF's tokenizer for the model's dictionary gives
    them: fairseq's 0 and 2, or CamemBERT's 5 and 6, whose rows become copies of 0 and 2
    (what fine-tuning trained). Returns what changed, a line each."""
    if dictionary is None or dictionary_layout(dictionary) != "camembert":
        return []
    bos, eos = CAMEMBERT_BOS_EOS
    tables = [model.get_input_embeddings().weight]  # the masked-LM head's decoder is tied to it
    if hasattr(model, "lm_head"):
        tables.append(model.lm_head.bias)
    with torch.no_grad():
        for table in tables:
            table[[bos, eos]] = table[[BOS, EOS]]
    model.config.update({"bos_token_id": bos, "eos_token_id": eos, "sep_token_id": eos})
    return [f"<s> and </s>: CamemBERT's ids {bos} and {eos} (rows copied from fairseq's {BOS} and {EOS})"]


COMMAND = "export-hf"
# What each kind of checkpoint leaves as: exporter(Checkpoint) -> (HF model, report).
EXPORTERS = {Kind.ENCODER: export_longformer, Kind.LED: export_led}


def export_hf(checkpoint: Path, out_dir: Path, tokenizer: Path | None = None, dictionary: Path | None = None,
              force: bool = False) -> dict:  # fmt: skip
    """Write ``out_dir`` for the HF class of the checkpoint's model; returns a report.

    With ``tokenizer``, the model's ``dictionary`` maps it to model ids; by default the
    checkpoint's own (:meth:`~longformer_fs.checkpoint.Checkpoint.dictionary`; the report
    names it). All or nothing, and never over another model without ``force``
    (:func:`~longformer_fs.output.guarded_output`).
    """
    ours = Checkpoint.read(checkpoint)
    exporter = EXPORTERS.get(ours.kind)
    if exporter is None:
        raise ExportError(f"checkpoint: {checkpoint} is a character LM; HF transformers has no such model")
    model, report = exporter(ours)
    if tokenizer is not None and dictionary is None:
        dictionary = ours.dictionary()
    if dictionary is not None and not Path(dictionary).is_file():
        raise FileNotFoundError(f"--dict: {dictionary} does not exist (the model's fairseq dict.txt)")
    if ours.kind is Kind.ENCODER:
        own = dictionary
        if own is None:
            with contextlib.suppress(FileNotFoundError):  # no dictionary: fairseq's ids stand
                own = ours.dictionary()
        report["notes"] = _tokenizer_ids(model, own)
    report = {"checkpoint": str(checkpoint), "output": str(out_dir), **report, "tokenizer": None,
              "dictionary": None if dictionary is None else str(dictionary),
              "inputs": sources(checkpoint)}  # fmt: skip
    with guarded_output(out_dir, COMMAND, report, force) as staging:  # the record is written last: as filled in
        model.save_pretrained(staging)
        if tokenizer is not None:
            report["tokenizer"] = write_hf_tokenizer(Path(tokenizer), Path(dictionary), staging)
    return report
