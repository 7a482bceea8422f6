"""``longformer-fs import-hf``: a released Longformer or LED in HF transformers' layout as
our checkpoint, with the tokenizer as ``prep`` takes it.

Read by :mod:`.read_hf`, its positions optionally copied further out
(:meth:`~.released.ReleasedModel.extend_positions`), written as ``convert-roberta`` and
``convert-bart`` write (:meth:`~.released.ReleasedModel.write`).
"""

from __future__ import annotations

from pathlib import Path

from ..fairseq_format import config_get
from .read_hf import read_hf_release

COMMAND = "import-hf"


def import_hf(hf_dir: Path, out_dir: Path, max_positions: int | None = None, tokenizer: Path | None = None,
              force: bool = False) -> dict:  # fmt: skip
    """``hf_dir`` as ``out_dir/model.pt`` and ``dict.txt`` (with ``encoder.json`` and
    ``vocab.bpe``, or ``sentencepiece.bpe.model``, for ``prep``); returns the report.

    Everything is read and checked before anything is written, so on any error
    ``out_dir`` is left as it was; ``force`` replaces another model there.
    """
    out_dir = Path(out_dir)
    model = read_hf_release(hf_dir, ("longformer", "led"), COMMAND, tokenizer)
    positions = [model.positions] * 2 if max_positions is None else model.extend_positions(max_positions)
    cfg = model.model_cfg
    report = {
        "source": str(hf_dir),
        "output": str(out_dir / "model.pt"),
        "model_type": model.model_type,
        "arch": model.name,
        "head": model.head.kind if model.head else "none",
        "task": config_get(model.cfg["task"], "_name"),
        "layers": [config_get(cfg, k) for k in ("encoder_layers", "decoder_layers") if config_get(cfg, k)],
        "window": config_get(cfg, "attention_window"),
        "dilation": config_get(cfg, "attention_dilation"),
        "causal": config_get(cfg, "causal_attention"),
        "positions": positions,
        "vocab": model.rows,
        "left_out": model.left_out,
        "notes": model.notes,
        "tokenizer": [str(f) for f in model.tokenizer.files],
    }  # fmt: skip
    model.write(out_dir, COMMAND, report, force)
    return report | {"inputs": model.sources}
