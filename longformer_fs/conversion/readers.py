"""Reading a released model, whatever its layout: one reader per layout, one entry point.

- fairseq's: a ``model.pt`` with its ``dict.txt`` beside it (and, for XLM-R's family, its
  ``sentencepiece.bpe.model``), :func:`read_fairseq_release`;
- HF transformers': a model directory with ``config.json``, :func:`.read_hf.read_hf_release`.

Both give a :class:`~.released.ReleasedModel`.
"""

from __future__ import annotations

from pathlib import Path

from ..conventions import SENTENCEPIECE_MODEL
from ..fairseq_format import read_checkpoint
from ..heads import Head
from ..hf_format.tokenizer_files import read_sentencepiece
from ..output import sources
from .read_hf import read_hf_release
from .released import NotConvertibleError, ReleasedModel


def read_release(src: Path, hf_types: tuple[str, ...], command: str) -> ReleasedModel:
    """``src``: a ``model.pt``, a directory holding ``model.pt`` and ``dict.txt``, or an
    HF model directory (``config.json``) of one of ``hf_types``; ``command`` names the
    caller in errors.

    Raises:
        FileNotFoundError: a missing checkpoint or dictionary.
        CheckpointError: not a readable fairseq checkpoint.
        NotConvertibleError: an HF directory of another model type, or one our models
            cannot express.
    """
    src = Path(src)
    if src.is_dir() and (src / "config.json").is_file() and not (src / "model.pt").is_file():
        return read_hf_release(src, hf_types, command)
    return read_fairseq_release(src)


def read_fairseq_release(src: Path) -> ReleasedModel:
    """A fairseq release: ``src`` is its ``model.pt`` or the directory holding it. Its
    ``dict.txt`` gives the ids, also of a SentencePiece model beside it, which goes along."""
    src = Path(src)
    ckpt = src / "model.pt" if src.is_dir() else src
    dictionary = ckpt.parent / "dict.txt"
    for path, what in ((ckpt, "checkpoint"), (dictionary, "dictionary (dict.txt next to the checkpoint)")):
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path} does not exist")
    state = read_checkpoint(ckpt)
    cfg = state.get("cfg")
    if cfg is None or cfg.get("model") is None:  # fairseq's loader turns older args into one
        raise NotConvertibleError(f"checkpoint: {ckpt} records no model config")
    tokenizer, files = None, [ckpt, dictionary]
    if (ckpt.parent / SENTENCEPIECE_MODEL).is_file():
        tokenizer = read_sentencepiece(ckpt.parent, hf_ids=False)
        files.append(ckpt.parent / SENTENCEPIECE_MODEL)
    lines = dictionary.read_text(encoding="utf-8").splitlines()
    model = ReleasedModel(ckpt, cfg, state["model"], lines, tokenizer, sources(*files))
    if not model.is_encoder:
        model.head = Head("summarizer")
    return model
