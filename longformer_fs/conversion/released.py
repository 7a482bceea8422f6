"""A released model as fairseq weights: the one type every converter reads, changes and writes.

The readers (:mod:`.readers`: a fairseq ``model.pt`` directory; :mod:`.read_hf`: a
directory in HF transformers' layout) each return a :class:`ReleasedModel`; the
transforms are functions on it (:func:`.roberta.to_longformer`, :func:`.bart.to_led`,
:meth:`ReleasedModel.extend_positions`); :meth:`ReleasedModel.write` is the one writer of a
``model.pt`` directory, through :func:`longformer_fs.output.guarded_output`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from ..conventions import PAD
from ..fairseq_format import config_get, config_set, model_name, save_start_checkpoint
from ..heads import Head
from ..models import led as led_layout
from ..models import longformer_roberta as roberta_layout
from ..models.weight_layout import reserved_position_rows
from ..output import guarded_output


class NotConvertibleError(ValueError):
    """The input is not the kind of model a converter takes; the message names the file."""


class PrepTokenizer(Protocol):
    """A released model's tokenizer, which goes along as the files ``prep`` reads
    (:mod:`longformer_fs.hf_format.tokenizer_files`' byte-level BPE and SentencePiece vocabulary)."""

    files: list[Path]

    def write_prep_files(self, out_dir: Path) -> list[Path]: ...


@dataclass
class ReleasedModel:
    """A released model laid out as fairseq would have trained it.

    Attributes:
        source: its ``model.pt``, or its HF directory.
        cfg: the whole fairseq config (``model``, ``task`` ...), as ``fairseq-train``
            records it in a checkpoint.
        weights: the state dict under fairseq's keys; tensors are the files', not copies.
        dictionary: its ``dict.txt`` lines (model id ``NUM_SPECIALS + r`` on line ``r``).
        tokenizer: the tokenizer that goes along as ``prep``'s files, where the release has
            one the model's ids follow from (an HF directory, XLM-R's ``sentencepiece.bpe.model``);
            fairseq's RoBERTa and BART ship GPT-2's BPE separately.
        sources: the files it was read from, stamped (:func:`longformer_fs.output.sources`): the
            record's ``inputs``, which ``--out``'s guard reads.
        model_type: HF's ``model_type``; None for a fairseq release.
        head: the head it brought, which decides the task its config names; None for a
            bare encoder (given a fresh masked-LM head, which fine-tuning never reads).
            A fairseq release's is read from its layout: RoBERTa's always has its
            masked-LM head, BART's is a summarizer.
        left_out: what of the release has no place here, a phrase each.
        notes: other changes worth a line in the report.
    """

    source: Path
    cfg: object
    weights: dict = field(repr=False)
    dictionary: list[str] = field(repr=False)
    tokenizer: PrepTokenizer | None = field(default=None, repr=False)
    sources: dict = field(default_factory=dict)
    model_type: str | None = None
    head: Head | None = Head("masked_lm")
    left_out: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def model_cfg(self):
        return self.cfg["model"]

    @property
    def name(self) -> str | None:
        """The registered model or architecture it was trained as."""
        return model_name(self.model_cfg)

    @property
    def is_encoder(self) -> bool:
        """A RoBERTa-like encoder (else a BART-like encoder-decoder)."""
        return roberta_layout.POSITIONS in self.weights

    @property
    def rows(self) -> int:
        """Token embedding rows: the vocabulary."""
        key = roberta_layout.TOKEN_EMBEDDINGS if self.is_encoder else led_layout.TOKEN_EMBEDDINGS
        return self.weights[key].shape[0]

    @property
    def positions_key(self) -> str:
        """Where the (encoder) position table is."""
        return roberta_layout.POSITIONS if self.is_encoder else led_layout.ENCODER_POSITIONS

    @property
    def positions(self) -> int:
        """Learned (encoder) positions."""
        return self.weights[self.positions_key].shape[0] - reserved_position_rows(PAD)

    def extend_positions(self, max_positions: int, init: str = "copy", seed: int = 0) -> list[int]:
        """Grow the (encoder) position table to ``max_positions`` (:func:`extend_position_table`)
        and set the model's and its task's position settings to it; returns the positions
        before and after."""
        key, before = self.positions_key, self.positions
        self.weights[key] = extend_position_table(self.weights[key], max_positions, PAD, init, seed)
        model_keys = ("max_positions", "max_source_positions") if self.is_encoder else ("max_source_positions",)
        config_set(self.model_cfg, **dict.fromkeys(model_keys, max_positions))
        task = self.cfg.get("task")
        if task is not None:  # the task's own limits (masked_lm's blocks, a fine-tuning task's inputs)
            task_keys = ("tokens_per_sample", "max_positions") if self.is_encoder else ("max_source_positions",)
            config_set(task, **{k: max_positions for k in task_keys if config_get(task, k) is not None})
        return [before, max_positions]

    def write(self, out_dir: Path, command: str, report: dict, force: bool = False) -> Path:
        """Write ``out_dir/model.pt`` (``fairseq-train`` starts from it), ``dict.txt``, the
        tokenizer as ``prep`` takes it and ``command``'s ``report``, all or nothing and
        never over another model without ``force`` (:func:`~longformer_fs.output.guarded_output`). The
        config's data directory becomes ``out_dir``, which holds the dictionary. Returns
        the path of model.pt."""
        out_dir = Path(out_dir)
        task = self.cfg.get("task")
        if task is not None:
            config_set(task, data=str(out_dir.resolve()))
        with guarded_output(out_dir, command, report | {"inputs": self.sources}, force) as staging:
            save_start_checkpoint({"cfg": self.cfg}, self.weights, staging / "model.pt")
            (staging / "dict.txt").write_text("".join(line + "\n" for line in self.dictionary), encoding="utf-8")
            if self.tokenizer is not None:
                self.tokenizer.write_prep_files(staging)
        return out_dir / "model.pt"


def training_config(arguments: list[str], settings: dict):
    """The whole fairseq config that ``fairseq-train ARGUMENTS`` records in its
    checkpoints, with the model's ``settings`` set over what the architecture chose: the
    config of a release that did not come from fairseq-train (an HF directory)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Hydra's deprecation notices about fairseq's own config files
        args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in arguments])
        for key, value in settings.items():
            setattr(args, key, value)
        return convert_namespace_to_omegaconf(args)


def extend_position_table(
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
