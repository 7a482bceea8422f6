"""A QA model exported by ``export-onnx`` (the ``qa`` span head) in onnxruntime: each token's
start and end logits, as the PyTorch model gives them to ``eval-qa``.

``longformer-fs eval-qa model.onnx --data DIR`` scores the file itself, the one that will
be served, on a ``prep qa`` split (``--quantize int8`` files included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .sessions import cpu_session

SPAN_OUTPUTS = ("start_logits", "end_logits")


class OnnxSpanModel:
    """``export-onnx``'s file of a ``longformer_qa`` checkpoint.

    Args:
        path: the ``.onnx`` file.
        threads: onnxruntime's intra-op threads (default: its own choice).

    Raises:
        ValueError: the file does not end in the span head's two outputs.
    """

    def __init__(self, path: Path, threads: int | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such ONNX file (write one with export-onnx)")
        self.session = cpu_session(self.path, threads)
        outputs = tuple(o.name for o in self.session.get_outputs())
        if outputs != SPAN_OUTPUTS:
            raise ValueError(
                f"{self.path}: outputs {', '.join(outputs)}, not a QA model's {' and '.join(SPAN_OUTPUTS)} "
                "(export-onnx of a longformer_qa checkpoint writes them)"
            )

    def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray, global_attention: np.ndarray) -> np.ndarray:
        """``(B, T, 2)`` float32 start and end logits of int ``(B, T)`` inputs: the token ids,
        1 on tokens and 0 on padding, 1 on global tokens (HF's ``input_ids``,
        ``attention_mask`` and ``global_attention_mask``)."""
        names = ("input_ids", "attention_mask", "global_attention_mask")
        feed = {
            n: np.ascontiguousarray(x, dtype=np.int64)
            for n, x in zip(names, (input_ids, attention_mask, global_attention), strict=True)
        }
        try:
            start, end = self.session.run(None, feed)
        except Exception as err:  # onnxruntime's errors carry the failing node's whole context
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"{self.path}: onnxruntime failed on a batch of {input_ids.shape[1]} tokens: {first[:300]}"
            ) from None
        return np.stack([start, end], axis=-1).astype(np.float32)
