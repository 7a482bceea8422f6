"""The graph an ONNX export serves: a ``longformer_roberta`` model and one head, called as
HF's Longformer is called.

Inputs (int64, ``(batch, length)``), named as HF names them:

- ``input_ids``: the model's token ids;
- ``attention_mask``: 1 for a token, 0 for padding;
- ``global_attention_mask``: 1 for a token with global attention. The model's own global
  tokens (``--global-attention-tokens``: ``<s>`` for a classifier) are global too, as in
  training.

Outputs: ``logits`` ``(batch, length, vocab)`` for the masked-LM head, ``logits``
``(batch, classes)`` for a classifier, ``start_logits`` and ``end_logits``
``(batch, length)`` for the QA span head.

fairseq's encoder asks the data whether a batch has padding (``bool(mask.any())``), which
an exported graph cannot; :func:`encoder_features` runs the same modules without that
question, passing the padding mask always (an all-False mask changes nothing). The LED's
encoder file (:mod:`.onnx_led`) is the same function over BART's encoder.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from ..attention import GlobalTokens
from ..heads import QA_HEAD, Head
from .errors import OnnxExportError

INPUTS = ("input_ids", "attention_mask", "global_attention_mask")


def encoder_features(encoder, input_ids, attention_mask, global_attention_mask) -> torch.Tensor:
    """``(B, T, C)`` features of the last layer of ``encoder`` (a
    :class:`~longformer_fs.models.longformer_encoder.LongformerTransformerEncoder` on the
    ``kernel`` backend) for int64 ``(B, T)`` inputs named as :data:`INPUTS`."""
    pad = attention_mask == 0
    tokens = input_ids.masked_fill(pad, encoder.padding_idx)
    glob = global_attention_mask != 0
    configured = encoder.global_mask(tokens)
    if configured is not None:
        glob = glob | configured
    found = GlobalTokens.find(glob, pad)
    for attention in encoder.attention_modules():
        attention.set_global_tokens(found)
    x, _ = encoder.forward_embedding(tokens)
    x = x.masked_fill(pad.unsqueeze(-1), 0.0).transpose(0, 1)
    for layer in encoder.layers:
        x = layer(x, encoder_padding_mask=pad)
    if encoder.layer_norm is not None:
        x = encoder.layer_norm(x)
    return x.transpose(0, 1)


def refuse_dilated(encoder, path: Path) -> None:
    """A ValueError naming the checkpoint at ``path`` when ``encoder`` has dilated heads,
    which the ONNX lowering (:mod:`.onnx_band`) does not compute yet."""
    dilations = sorted({d for attention in encoder.attention_modules() for d in attention.dilations})
    if dilations != [1]:
        raise OnnxExportError(
            f"checkpoint: {path} has dilated heads (dilations {dilations}), which the ONNX lowering does not "
            "compute yet"
        )


def use_kernel_backend(encoder) -> None:
    """Put every attention of ``encoder`` on the ``kernel`` backend, whose op the ONNX
    lowering (:mod:`.onnx_band`) knows."""
    for attention in encoder.attention_modules():
        attention.backend = "kernel"


class ServedModel(nn.Module):
    """``(input_ids, attention_mask, global_attention_mask) -> outputs`` of ``head``.

    Args:
        model: a ``longformer_roberta`` model in eval mode; its attention runs on the
            ``kernel`` backend, whose op the ONNX lowering knows.
        head: the head to end in.
    """

    def __init__(self, model: nn.Module, head: Head):
        super().__init__()
        self.model, self.head = model, head
        self.encoder = model.encoder.sentence_encoder
        use_kernel_backend(self.encoder)

    def forward(self, input_ids, attention_mask, global_attention_mask):
        features = encoder_features(self.encoder, input_ids, attention_mask, global_attention_mask)
        if self.head.kind == "masked_lm":
            return self.model.encoder.output_layer(features)
        if self.head.kind == "classification":
            return self.model.classification_heads[self.head.name](features)
        logits = self.model.token_logits(QA_HEAD, features)
        return logits[..., 0], logits[..., 1]
