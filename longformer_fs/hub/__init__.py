"""Using a model of ours from Python, as fairseq users use theirs (``docs/python.md``).

:func:`from_pretrained` loads any checkpoint of ours (an ``import-hf`` or ``convert-*``
output, a ``fairseq-train`` or ``make`` run's) with the hub interface of its kind, built on
fairseq's own:

- ``longformer_roberta``, with any head: :class:`~.encoder.LongformerHubInterface`
  (fairseq's ``RobertaHubInterface``, with global attention and the fine-tuned tasks' calls);
- ``led``: :class:`~.led.LEDHubInterface` (fairseq's ``BARTHubInterface``);
- ``longformer_lm``: :class:`~.char_lm.CharLMHubInterface`, which writes text.

The model classes' ``from_pretrained`` is this function. It needs the model's dictionary
(beside the checkpoint, or in the data the checkpoint names) and, but for the character
LM, its tokenizer: ``encoder.json`` + ``vocab.bpe`` (GPT-2's BPE) or a SentencePiece model
beside the checkpoint, the files the data was prepared with (its ``prep.json`` records
them), or the ones given.
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import Checkpoint, Kind


def from_pretrained(
    model_name_or_path,
    checkpoint_file: str = "model.pt",
    data_name_or_path=None,
    *,
    encoder_json=None,
    vocab_bpe=None,
    spm=None,
    **overrides,
):
    """The checkpoint's hub interface.

    Args:
        model_name_or_path: a directory (holding ``checkpoint_file``) or the checkpoint.
        data_name_or_path: a data directory for the task's dictionaries (relative to the
            model's directory when it starts with ``.``, as fairseq reads it); by default
            the model's own dictionary (:meth:`~longformer_fs.checkpoint.Checkpoint.task_data`).
        encoder_json, vocab_bpe, spm: the tokenizer's files, where they are not beside the
            checkpoint and the data did not record them.
        overrides: task and model settings, as fairseq's ``arg_overrides``.

    Raises:
        FileNotFoundError: no checkpoint, dictionary or tokenizer; the message says what to pass.
        ValueError: not a checkpoint of ours (``NotOursError``), or unreadable (``CheckpointError``).
    """
    from .char_lm import CharLMHubInterface
    from .encoder import LongformerHubInterface
    from .led import LEDHubInterface

    path = Path(model_name_or_path)
    checkpoint = Checkpoint.read(path / checkpoint_file if path.is_dir() else path)
    interface = {Kind.ENCODER: LongformerHubInterface, Kind.LED: LEDHubInterface, Kind.CHAR_LM: CharLMHubInterface}[
        checkpoint.kind
    ]
    data = data_name_or_path
    if data is not None and str(data).startswith("."):
        data = checkpoint.path.parent / data
    model, task = checkpoint.load("cpu", data, overrides)
    if interface is CharLMHubInterface:
        return interface(checkpoint.state["cfg"], task, model)
    tokenizer = checkpoint.tokenizer(checkpoint.dictionary(data), encoder_json, vocab_bpe, spm)
    return interface(checkpoint.state["cfg"], task, model, tokenizer)
