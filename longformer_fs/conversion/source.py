"""Reading the checkpoint a converter starts from, and what every converter shares.

Converters take a released model (RoBERTa, BART): a fairseq ``model.pt`` with its
``dict.txt`` beside it, or a directory in HF transformers' layout (read by
:mod:`.hf_import`). They read it here, change the weights the model modules say how to
change, and write a checkpoint ``fairseq-train`` starts from
(:func:`~longformer_fs.checkpoint_files.save_start_checkpoint`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checkpoint_files import config_set, model_config, model_name, read_checkpoint, save_start_checkpoint
from ..conventions import SENTENCEPIECE_MODEL
from ..models.checkpoints import reserved_position_rows
from .output import staged_output


class NotConvertibleError(ValueError):
    """The checkpoint is not the kind of model a converter takes."""


@dataclass
class SourceCheckpoint:
    """A released model as fairseq holds it.

    Attributes:
        path: its ``model.pt``, or its HF directory.
        dictionary: its ``dict.txt`` lines.
        state: the whole checkpoint (``cfg`` or ``args``, and ``model``, the weights).
        model_cfg: its model settings, an ``argparse.Namespace`` (pre-Hydra) or a DictConfig.
        name: the model or architecture it was trained as.
        tokenizer: for an HF directory, its byte-level BPE or SentencePiece model
            (:mod:`~longformer_fs.conversion.hf_tokenizer`), which the conversion writes
            as ``prep``'s files; fairseq's RoBERTa ships GPT-2's separately, its XLM-R
            a SentencePiece model beside ``model.pt``.
    """

    path: Path
    dictionary: list[str]
    state: dict
    model_cfg: object
    name: str | None
    tokenizer: object | None = field(default=None, repr=False)

    @property
    def weights(self) -> dict:
        return self.state["model"]


def write_converted(
    source: SourceCheckpoint, weights: dict, out_dir: Path, dictionary: list[str], **task_settings
) -> Path:
    """Write a converted checkpoint: ``out_dir/model.pt`` (fairseq-train starts from it),
    ``out_dir/dict.txt`` and, where the source brings one (an HF directory, XLM-R's
    release), its tokenizer as ``prep`` takes it;
    ``task_settings`` go into the task config it was trained with, where it has one.
    All or nothing (:func:`~.output.staged_output`). Returns the path of model.pt."""
    from .hf_tokenizer import write_prep_files

    cfg = source.state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        config_set(cfg["task"], **task_settings)
    with staged_output(out_dir) as staging:
        save_start_checkpoint(source.state, weights, staging / "model.pt")
        (staging / "dict.txt").write_text("".join(line + "\n" for line in dictionary), encoding="utf-8")
        if source.tokenizer is not None:
            write_prep_files(source.tokenizer, staging)
    return Path(out_dir) / "model.pt"


def read_source(src: Path, hf_types: tuple[str, ...] = ()) -> SourceCheckpoint:
    """``src``: a ``model.pt``, a directory holding ``model.pt`` and ``dict.txt``, or an
    HF model directory (``config.json``) of one of ``hf_types``.

    Raises:
        FileNotFoundError: a missing checkpoint or dictionary.
        CheckpointError: not a readable fairseq checkpoint.
        NotConvertibleError: an HF directory of another model type.
    """
    src = Path(src)
    if src.is_dir() and (src / "config.json").is_file() and not (src / "model.pt").is_file():
        from .hf_import import read_hf_source  # builds on this module, hence imported here

        return read_hf_source(src, hf_types)
    ckpt = src / "model.pt" if src.is_dir() else src
    dictionary = ckpt.parent / "dict.txt"
    for path, what in ((ckpt, "checkpoint"), (dictionary, "dictionary (dict.txt next to the checkpoint)")):
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path} does not exist")
    state = read_checkpoint(ckpt)
    model_cfg = model_config(state)
    lines = dictionary.read_text(encoding="utf-8").splitlines()
    tokenizer = None
    if (ckpt.parent / SENTENCEPIECE_MODEL).is_file():  # XLM-R's release: its tokenizer goes along
        from .hf_tokenizer import read_sentencepiece

        tokenizer = read_sentencepiece(ckpt.parent, xlmr_ids=False)  # dict.txt gives the ids
    return SourceCheckpoint(ckpt, lines, state, model_cfg, model_name(model_cfg), tokenizer)


def training_config(arguments: list[str], settings: dict):
    """The whole fairseq config that ``fairseq-train ARGUMENTS`` records in its
    checkpoints, with the model's ``settings`` set over what the architecture chose: the
    config of a checkpoint that did not come from fairseq-train (an HF import)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Hydra's deprecation notices about fairseq's own config files
        args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in arguments])
        for key, value in settings.items():
            setattr(args, key, value)
        return convert_namespace_to_omegaconf(args)


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
