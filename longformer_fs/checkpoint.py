"""A checkpoint of ours, read once: :class:`Checkpoint`, the counterpart of
:class:`~longformer_fs.conversion.released.ReleasedModel` for what we train (a
``fairseq-train`` or ``make`` run's checkpoint, or a ``convert-*`` / ``import-hf`` output).

It knows, once: its kind (:class:`Kind`: an encoder, an LED or a character LM), the head it
ends in (:class:`~longformer_fs.heads.Head`), its task, its dictionary and tokenizer, and how
to load its model with its task on a device. The hubs, ``export-hf``, ``export-onnx``,
``summarize``, the ``eval-*`` commands and the recipes start from it.

A task is set up from a data directory, which holds its dictionaries: the data given, else
the data the checkpoint was trained on when its dictionaries are still there, else the
model's own ``dict.txt`` laid out as its task reads it (an imported or converted model's
directory holds only that; :meth:`Checkpoint.task_data`).
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator

import torch

from .conventions import MANIFEST, SENTENCEPIECE_MODEL, SOURCE, TARGET, first_data_directory
from .fairseq_format import (
    config_get,
    find_dictionary,
    model_config,
    model_name,
    read_checkpoint,
    task_dictionaries,
    task_dictionary,
)
from .heads import Head
from .tokenization import SubwordEncoder, SubwordSpec


class Kind(enum.Enum):
    """What a checkpoint of ours holds, by the registered name it was trained as."""

    ENCODER = "longformer_roberta"
    LED = "led"
    CHAR_LM = "longformer_lm"


class NotOursError(ValueError):
    """A fairseq checkpoint of a model that is not ours (a RoBERTa, a BART, an LSTM...)."""


@dataclass
class Checkpoint:
    """A checkpoint of ours and its settings.

    Attributes:
        path: the ``.pt`` file.
        state: its contents, as fairseq reads them (:func:`read_checkpoint`).
    """

    path: Path
    state: dict

    @classmethod
    def read(cls, path: Path, upgrade: bool = True) -> Checkpoint:
        """Read ``path`` (a ``.pt`` file); any fairseq checkpoint loads (:meth:`load`), and
        :attr:`kind` says whether it is one of ours.

        ``upgrade=False`` is the light read: the settings as stored, by torch alone, without
        importing fairseq (``make``'s recipes ask only what the model is). Its kind, name,
        settings and head are known; it does not :meth:`load`.

        Raises:
            FileNotFoundError: no such file.
            CheckpointError: not a readable fairseq checkpoint.
        """
        return cls(Path(path), read_checkpoint(Path(path), upgrade=upgrade))

    @classmethod
    def in_memory(cls, model, settings: argparse.Namespace | None = None) -> Checkpoint:
        """A fairseq model in memory as the checkpoint a save would write of it: its
        settings (``settings``, by default ``model.args``) and weights, at no path (the
        benchmarks export models they build). It does not :meth:`load`."""
        from fairseq.models import MODEL_REGISTRY

        args = argparse.Namespace(**vars(settings if settings is not None else model.args))
        if not model_name(args):  # built from settings alone: named by its registered class
            args.arch = next(name for name, cls in MODEL_REGISTRY.items() if cls is type(model))
        return cls(Path(f"<{type(model).__name__} in memory>"), {"args": args, "model": model.state_dict()})

    # ------------------------------------------------------------ what it is

    @property
    def name(self) -> str:
        """The registered model or architecture name it was trained as."""
        return str(model_name(model_config(self.state)))

    @cached_property
    def kind(self) -> Kind:
        """Raises:
        NotOursError: a fairseq checkpoint of another model; the message names it."""
        kind = next((k for k in Kind if self.name.startswith(k.value)), None)
        if kind is None:
            raise NotOursError(
                f"checkpoint: {self.path} is a {self.name!r} model, not one of ours "
                f"({', '.join(k.value for k in Kind)}); convert a RoBERTa or BART first with "
                "`longformer-fs convert-roberta` / `convert-bart`"
            )
        return kind

    @property
    def model_cfg(self):
        """Its model settings (an ``argparse.Namespace`` or a DictConfig)."""
        return model_config(self.state)

    @property
    def task_cfg(self):
        return self.state["cfg"]["task"]

    @property
    def task(self) -> str:
        """The registered name of the task it was trained with."""
        return str(config_get(self.task_cfg, "_name"))

    @cached_property
    def head(self) -> Head:
        """The head it ends in.

        Raises:
            ValueError: an encoder with several heads that are not one task's.
        """
        if self.kind is Kind.LED:
            return Head("summarizer")
        if self.kind is Kind.CHAR_LM:
            return Head("char_lm")
        try:
            return Head.of(self.state["model"])
        except ValueError as err:
            raise ValueError(f"checkpoint: {self.path} has {err}") from None

    # ------------------------------------------------------------ its dictionary and tokenizer

    def dictionary(self, data: Path | None = None) -> Path:
        """The model's fairseq ``dict.txt``: beside the checkpoint, else in ``data``, else in
        the data it was trained on (:func:`~.fairseq_format.find_dictionary`)."""
        return find_dictionary(self.path, self.state, data)

    def tokenizer(self, dictionary: Path | None = None, encoder_json=None, vocab_bpe=None, spm=None) -> SubwordEncoder:
        """The model's tokenizer over ``dictionary`` (by default :meth:`dictionary`'s): the
        files given, else those beside the checkpoint (``encoder.json`` + ``vocab.bpe``, or a
        SentencePiece model), else those its training data was prepared with.

        Raises:
            FileNotFoundError: none of them; the message names what to pass.
            ValueError: half of GPT-2's pair given.
        """
        dictionary = Path(dictionary) if dictionary is not None else self.dictionary()
        if spm is not None:
            return SubwordSpec.spm(spm, dictionary).load()
        if encoder_json is not None or vocab_bpe is not None:
            if encoder_json is None or vocab_bpe is None:
                raise ValueError("tokenizer: GPT-2's BPE takes both encoder_json= and vocab_bpe=")
            return SubwordSpec.gpt2(encoder_json, vocab_bpe, dictionary).load()
        here = self.path.parent
        if (here / "encoder.json").is_file() and (here / "vocab.bpe").is_file():
            return SubwordSpec.gpt2(here / "encoder.json", here / "vocab.bpe", dictionary).load()
        if (here / SENTENCEPIECE_MODEL).is_file():
            return SubwordSpec.spm(here / SENTENCEPIECE_MODEL, dictionary).load()
        recorded = self._recorded_subword()
        if recorded is not None:
            kind, files = recorded
            if kind == "gpt2":
                return SubwordSpec.gpt2(files[0], files[1], dictionary).load()
            return SubwordSpec.spm(files[0], dictionary).load()
        raise FileNotFoundError(
            f"tokenizer: no encoder.json and vocab.bpe (GPT-2's BPE) or {SENTENCEPIECE_MODEL} beside {self.path}, "
            "and its data records none that still exist; pass encoder_json= and vocab_bpe=, or spm="
        )

    def _recorded_subword(self) -> tuple[str, list[Path]] | None:
        """The tokenizer files its training data was prepared with, as the data's
        ``prep.json`` records them (``inputs.subword``), if they are all still there."""
        data = config_get(self.task_cfg, "data")
        if not data:
            return None
        try:
            manifest = json.loads((first_data_directory(data) / MANIFEST).read_text())
            subword = manifest["inputs"]["subword"]
            kind, files = subword["kind"], [Path(stamp["file"]) for stamp in subword["files"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        wanted = files[:2] if kind == "gpt2" else files[:1]
        return (kind, wanted) if wanted and all(f.is_file() for f in wanted) else None

    # ------------------------------------------------------------ its model and task

    @contextlib.contextmanager
    def task_data(self, data: Path | None = None, dictionary: Path | None = None) -> Iterator[tuple[Path, dict]]:
        """A data directory to set its task up from, and the task settings that go with it
        (``arg_overrides``).

        ``data`` when given; else the data it was trained on, when its dictionaries are
        there; else a temporary directory holding the model's ``dict.txt`` (``dictionary``,
        by default :meth:`dictionary`'s) where the task reads it
        (:func:`~.fairseq_format.task_dictionaries`), with a ``sentence_prediction`` model's
        classes as ``label/dict.txt``. The temporary directory is gone after the block:
        tasks read their dictionaries at set-up.
        """
        task, name = self.task_cfg, self.task
        overrides = {}
        if name == "translation":
            source, target = config_get(task, "source_lang", SOURCE), config_get(task, "target_lang", TARGET)
            overrides = {"source_lang": source, "target_lang": target}
        if data is not None:
            yield Path(data), overrides
            return
        trained = config_get(task, "data")
        trained = first_data_directory(trained) if trained else None
        if dictionary is None and trained is not None and task_dictionary(task, trained).is_file():
            yield trained, overrides
            return
        dictionary = Path(dictionary) if dictionary is not None else self.dictionary()
        with tempfile.TemporaryDirectory() as tmp:
            files = dict.fromkeys(task_dictionaries(task), dictionary.read_bytes())
            if name == "sentence_prediction":
                classes = int(config_get(task, "num_classes", 0))
                files["label/dict.txt"] = "".join(f"{k} 1\n" for k in range(classes)).encode()
            for relative, content in files.items():
                (Path(tmp) / relative).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / relative).write_bytes(content)
            yield Path(tmp), overrides

    def load(
        self,
        device: str | torch.device = "cpu",
        data: Path | None = None,
        overrides: dict | None = None,
        dictionary: Path | None = None,
    ):
        """Its model (in eval mode, on ``device``) and its task. The task reads its splits
        item by item, as evaluation and generation predict: one trained on packed rows
        (``pack``) reads them unpacked unless ``overrides`` say otherwise.

        Args:
            data: a data directory for the task (its dictionaries, its splits); by default
                :meth:`task_data`'s.
            overrides: further task/model settings, as fairseq's ``arg_overrides``.
            dictionary: the model's ``dict.txt``, where :meth:`dictionary` would not find it.
        """
        from fairseq import checkpoint_utils
        from fairseq.dataclass.utils import overwrite_args_by_name

        with self.task_data(data, dictionary) as (directory, task_overrides):
            arg_overrides = {"pack": False, **task_overrides, **(overrides or {}), "data": str(directory)}
            # fairseq applies arg_overrides only to a checkpoint it reads itself, and the task
            # would look for its dictionaries where the model was trained (or imported).
            overwrite_args_by_name(self.state["cfg"], arg_overrides)
            models, _, task = checkpoint_utils.load_model_ensemble_and_task(
                [str(self.path)], arg_overrides=arg_overrides, state=self.state
            )
        return models[0].to(device).eval(), task


def load_model(checkpoint: Path, data: Path | None = None, device: str | torch.device = "cpu"):
    """The model (eval mode, on ``device``) and task of the checkpoint at ``checkpoint``
    (:meth:`Checkpoint.load`), its task reading ``data``."""
    return Checkpoint.read(checkpoint).load(device, data)
