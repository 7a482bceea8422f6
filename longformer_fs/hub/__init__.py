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

import json
from pathlib import Path

from ..checkpoint_files import config_get, find_dictionary, model_config, model_name, read_checkpoint
from ..conventions import MANIFEST, SENTENCEPIECE_MODEL
from ..evaluation.checkpoint import dictionary_data, load_model
from ..tokenization import SubwordEncoder, SubwordSpec


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
            the model's own dictionary (:func:`~..evaluation.checkpoint.dictionary_data`).
        encoder_json, vocab_bpe, spm: the tokenizer's files, where they are not beside the
            checkpoint and the data did not record them.
        overrides: task and model settings, as fairseq's ``arg_overrides``.

    Raises:
        FileNotFoundError: no checkpoint, dictionary or tokenizer; the message says what to pass.
        ValueError: not a checkpoint of ours (or unreadable: ``CheckpointError``).
    """
    from .char_lm import CharLMHubInterface
    from .encoder import LongformerHubInterface
    from .led import LEDHubInterface

    path = Path(model_name_or_path)
    checkpoint = path / checkpoint_file if path.is_dir() else path
    state = read_checkpoint(checkpoint)
    name = str(model_name(model_config(state)))
    kinds = {"longformer_roberta": LongformerHubInterface, "led": LEDHubInterface, "longformer_lm": CharLMHubInterface}
    interface = next((cls for prefix, cls in kinds.items() if name.startswith(prefix)), None)
    if interface is None:
        raise ValueError(
            f"checkpoint: {checkpoint} is a {name!r} model; from_pretrained takes {', '.join(kinds)} checkpoints"
        )
    data = data_name_or_path
    if data is not None and str(data).startswith("."):
        data = checkpoint.parent / data
    with dictionary_data(checkpoint, state, data) as (directory, task_overrides):
        model, task = load_model(checkpoint, directory, "cpu", {**task_overrides, **overrides}, state)
    if interface is CharLMHubInterface:
        return interface(state["cfg"], task, model)
    dictionary = find_dictionary(checkpoint, state, data)
    tokenizer = find_tokenizer(checkpoint, state, dictionary, encoder_json, vocab_bpe, spm)
    return interface(state["cfg"], task, model, tokenizer)


def find_tokenizer(
    checkpoint: Path, state: dict, dictionary: Path, encoder_json=None, vocab_bpe=None, spm=None
) -> SubwordEncoder:
    """The model's tokenizer over its ``dictionary``: the files given, else those beside the
    checkpoint (``encoder.json`` + ``vocab.bpe``, or a SentencePiece model), else those its
    training data was prepared with.

    Raises:
        FileNotFoundError: none of them; the message names what to pass.
    """
    if spm is not None:
        return SubwordSpec.spm(spm, dictionary).load()
    if encoder_json is not None or vocab_bpe is not None:
        if encoder_json is None or vocab_bpe is None:
            raise ValueError("tokenizer: GPT-2's BPE takes both encoder_json= and vocab_bpe=")
        return SubwordSpec.gpt2(encoder_json, vocab_bpe, dictionary).load()
    here = Path(checkpoint).parent
    if (here / "encoder.json").is_file() and (here / "vocab.bpe").is_file():
        return SubwordSpec.gpt2(here / "encoder.json", here / "vocab.bpe", dictionary).load()
    if (here / SENTENCEPIECE_MODEL).is_file():
        return SubwordSpec.spm(here / SENTENCEPIECE_MODEL, dictionary).load()
    recorded = _recorded_subword(state)
    if recorded is not None:
        kind, files = recorded
        if kind == "gpt2":
            return SubwordSpec.gpt2(files[0], files[1], dictionary).load()
        return SubwordSpec.spm(files[0], dictionary).load()
    raise FileNotFoundError(
        f"tokenizer: no encoder.json and vocab.bpe (GPT-2's BPE) or {SENTENCEPIECE_MODEL} beside {checkpoint}, "
        "and its data records none that still exist; pass encoder_json= and vocab_bpe=, or spm="
    )


def _recorded_subword(state: dict) -> tuple[str, list[Path]] | None:
    """The tokenizer files the checkpoint's training data was prepared with, as its
    ``prep.json`` records them (``inputs.subword``), if they are all still there."""
    data = config_get(state["cfg"]["task"], "data")
    if not data:
        return None
    try:
        manifest = json.loads((Path(str(data).split(":")[0]) / MANIFEST).read_text())
        subword = manifest["inputs"]["subword"]
        kind, files = subword["kind"], [Path(stamp[0]) for stamp in subword["files"]]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    wanted = files[:2] if kind == "gpt2" else files[:1]
    return (kind, wanted) if wanted and all(f.is_file() for f in wanted) else None
