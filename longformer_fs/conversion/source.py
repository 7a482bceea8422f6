"""Reading the checkpoint a converter starts from, and what every converter shares.

Converters take a released fairseq model (RoBERTa, BART): a ``model.pt`` with its
``dict.txt`` beside it. They read it here, change the weights the model modules say
how to change, and write a checkpoint ``fairseq-train`` starts from
(:func:`~longformer_fs.models.checkpoints.save_start_checkpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary

from ..models.checkpoints import config_set, model_config, model_name, reserved_position_rows, save_start_checkpoint


class NotConvertibleError(ValueError):
    """The checkpoint is not the kind of model a converter takes."""


@dataclass
class SourceCheckpoint:
    path: Path  # model.pt
    dictionary: Path  # dict.txt beside it
    state: dict  # the whole checkpoint
    model_cfg: object  # argparse.Namespace (pre-Hydra) or DictConfig
    name: str | None  # the model or architecture it was trained as

    @property
    def weights(self) -> dict:
        return self.state["model"]

    def padding_idx(self) -> int:
        return Dictionary.load(str(self.dictionary)).pad()


def write_converted(source: SourceCheckpoint, weights: dict, out_dir: Path, dictionary: bytes, **task_settings) -> Path:
    """Write a converted checkpoint: ``out_dir/model.pt`` (fairseq-train starts from it)
    and ``out_dir/dict.txt``; ``task_settings`` go into the task config it was trained
    with, where it has one. Returns the path of model.pt."""
    cfg = source.state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        config_set(cfg["task"], **task_settings)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_start_checkpoint(source.state, weights, out_dir / "model.pt")
    (out_dir / "dict.txt").write_bytes(dictionary)
    return out_dir / "model.pt"


def read_source(src: Path) -> SourceCheckpoint:
    """``src``: a ``model.pt``, or a directory holding ``model.pt`` and ``dict.txt``.

    Raises:
        FileNotFoundError: a missing checkpoint or dictionary.
        NotConvertibleError: not a readable fairseq checkpoint with a model config.
    """
    src = Path(src)
    ckpt = src / "model.pt" if src.is_dir() else src
    dictionary = ckpt.parent / "dict.txt"
    for path, what in ((ckpt, "checkpoint"), (dictionary, "dictionary (dict.txt next to the checkpoint)")):
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path} does not exist")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))
    except Exception as err:  # pickle, zip or torch errors: report the file, not the stack
        raise NotConvertibleError(f"checkpoint: {ckpt} could not be read as a fairseq checkpoint ({err})") from None
    model_cfg = model_config(state)
    if model_cfg is None or "model" not in state:
        raise NotConvertibleError(f"checkpoint: {ckpt} has no model config and weights; is it a fairseq checkpoint?")
    return SourceCheckpoint(ckpt, dictionary, state, model_cfg, model_name(model_cfg))


def extend_positions(
    weight: torch.Tensor, max_positions: int, padding_idx: int, init: str = "copy", seed: int = 0
) -> torch.Tensor:
    """A learned position table for ``max_positions`` positions.

    Args:
        weight: ``(padding_idx + 1 + P, C)``, fairseq's table for ``P`` positions.
        max_positions: new ``P' >= P``.
        padding_idx: the dictionary's padding index (1 for RoBERTa and BART).
        init: ``"copy"`` tiles the ``P`` learned rows (the paper's); ``"random"`` draws
            ``N(0, 0.02^2)`` rows (BERT's initialisation) for every position.

    Returns:
        ``(padding_idx + 1 + P', C)``; the reserved first rows are unchanged.
    """
    reserved = reserved_position_rows(padding_idx)
    learned = weight[reserved:]
    if max_positions < learned.shape[0]:
        raise ValueError(
            f"max_positions: {max_positions} is smaller than the checkpoint's {learned.shape[0]}; "
            "Longformer extends the position table, it never cuts it"
        )
    if init == "copy":
        repeats = -(-max_positions // learned.shape[0])
        rows = learned.repeat(repeats, 1)[:max_positions]
    elif init == "random":
        gen = torch.Generator().manual_seed(seed)
        rows = (torch.randn(max_positions, weight.shape[1], generator=gen, dtype=torch.float64) * 0.02).to(weight)
    else:
        raise ValueError(f"position_init: expected 'copy' or 'random', got {init!r}")
    return torch.cat([weight[:reserved], rows])
