"""Where each weight of our models sits in HF transformers' layout.

One table per model family, read in both directions: ``export-hf`` writes HF names from
ours, ``import-hf`` and the converters' HF sources read them back. Every function returns
``{fairseq key: HF key}`` for whole tensors (``weight`` and ``bias`` listed one by one).

- BERT-style encoders (RoBERTa, Longformer): HF's ``embeddings`` and ``encoder.layer.i``
  under the model's prefix (``roberta.``, ``longformer.``; none for a bare model) against
  fairseq's RoBERTa keys, which ``longformer_roberta`` keeps.
- Encoder-decoders (BART, LED): HF's ``encoder.layers.i`` / ``decoder.layers.i`` under
  ``model.`` (BART), ``led.`` (LED) or nothing (a bare model) against fairseq's BART keys,
  which ``led`` keeps. LED's encoder self-attention sits one level deeper in HF
  (``self_attn.longformer_self_attn.query``).

Positions and token embeddings are not in these tables where the two layouts differ in
more than a name (reserved rows, token types, tied copies); the callers handle them.
"""

from __future__ import annotations

from ..models import led as led_layout
from ..models import longformer_roberta as roberta_layout

PARAMS = ("weight", "bias")

# Inside encoder layer i: fairseq module (under roberta_layout.LAYERS + "i.") -> HF module
# (under "<prefix>encoder.layer.i.").
_BERT_LAYER = {
    "self_attn.q_proj": "attention.self.query",
    "self_attn.k_proj": "attention.self.key",
    "self_attn.v_proj": "attention.self.value",
    "self_attn.out_proj": "attention.output.dense",
    "self_attn_layer_norm": "attention.output.LayerNorm",
    "fc1": "intermediate.dense",
    "fc2": "output.dense",
    "final_layer_norm": "output.LayerNorm",
}
_BERT_GLOBAL = {
    "self_attn.q_proj_global": "attention.self.query_global",
    "self_attn.k_proj_global": "attention.self.key_global",
    "self_attn.v_proj_global": "attention.self.value_global",
}
# The masked-LM head (HF's ``lm_head.decoder.weight`` is the word embeddings, tied).
LM_HEAD = {
    roberta_layout.LM_HEAD + "dense.weight": "lm_head.dense.weight",
    roberta_layout.LM_HEAD + "dense.bias": "lm_head.dense.bias",
    roberta_layout.LM_HEAD + "layer_norm.weight": "lm_head.layer_norm.weight",
    roberta_layout.LM_HEAD + "layer_norm.bias": "lm_head.layer_norm.bias",
    roberta_layout.LM_HEAD + "bias": "lm_head.bias",
}
LM_HEAD_DECODER = "lm_head.decoder.weight"  # fairseq: roberta_layout.LM_HEAD + "weight"
# The HF keys of the parts that are not in the tables (their callers map them).
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
POSITION_EMBEDDINGS = "embeddings.position_embeddings.weight"
TOKEN_TYPE_EMBEDDINGS = "embeddings.token_type_embeddings.weight"


def bert_encoder(layers: int, prefix: str, global_projections: bool) -> dict[str, str]:
    """The embedding norm and every layer of a RoBERTa (``global_projections`` False) or
    Longformer encoder; ``prefix`` is HF's (``"longformer."``, ``"roberta."`` or ``""``)."""
    names = {roberta_layout.EMBEDDING_NORM + p: f"{prefix}embeddings.LayerNorm.{p}" for p in PARAMS}
    modules = _BERT_LAYER | (_BERT_GLOBAL if global_projections else {})
    for i in range(layers):
        for fs, hf in modules.items():
            for p in PARAMS:
                names[f"{roberta_layout.LAYERS}{i}.{fs}.{p}"] = f"{prefix}encoder.layer.{i}.{hf}.{p}"
    return names


# Inside an encoder layer of LED: fairseq module -> HF module. BART's encoder layers and both
# models' decoder layers keep the same names on both sides.
_LED_ENCODER_LAYER = {
    "self_attn.q_proj": "self_attn.longformer_self_attn.query",
    "self_attn.k_proj": "self_attn.longformer_self_attn.key",
    "self_attn.v_proj": "self_attn.longformer_self_attn.value",
    "self_attn.q_proj_global": "self_attn.longformer_self_attn.query_global",
    "self_attn.k_proj_global": "self_attn.longformer_self_attn.key_global",
    "self_attn.v_proj_global": "self_attn.longformer_self_attn.value_global",
    "self_attn.out_proj": "self_attn.output",
}
_BART_ENCODER_LAYER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                       "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm"]  # fmt: skip
_DECODER_LAYER = _BART_ENCODER_LAYER + ["encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj",
                                        "encoder_attn.out_proj", "encoder_attn_layer_norm"]  # fmt: skip
SHARED_EMBEDDINGS = "shared.weight"
LM_HEAD_WEIGHT = "lm_head.weight"
FINAL_LOGITS_BIAS = "final_logits_bias"


def encoder_decoder(encoder_layers: int, decoder_layers: int, prefix: str, longformer: bool) -> dict[str, str]:
    """Both embedding norms and every layer of a BART (``longformer`` False) or LED
    encoder-decoder; ``prefix`` is HF's (``"led."``, ``"model."`` or ``""``)."""
    names = {}
    for side in ("encoder", "decoder"):
        for p in PARAMS:
            names[f"{side}.layernorm_embedding.{p}"] = f"{prefix}{side}.layernorm_embedding.{p}"
    encoder_layer = {m: m for m in _BART_ENCODER_LAYER}
    if longformer:
        encoder_layer |= _LED_ENCODER_LAYER
    for i in range(encoder_layers):
        for fs, hf in encoder_layer.items():
            for p in PARAMS:
                names[f"{led_layout.ENCODER_LAYERS}{i}.{fs}.{p}"] = f"{prefix}encoder.layers.{i}.{hf}.{p}"
    for i in range(decoder_layers):
        for module in _DECODER_LAYER:
            for p in PARAMS:
                names[f"{led_layout.DECODER_LAYERS}{i}.{module}.{p}"] = f"{prefix}decoder.layers.{i}.{module}.{p}"
    return names
