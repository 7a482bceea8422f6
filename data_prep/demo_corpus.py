"""The demo corpus: text where only long context helps.

Each document is a random key of ``period`` characters over text8's alphabet, written
``repeats`` times. The first copy is unpredictable (log2 27 = 4.75 bits a character);
every later character equals the one ``period`` positions back. A model whose training
sequences are shorter than ``period`` cannot learn that; one trained on longer
sequences, with windows reaching back ``period``, can. So BPC falls from phase to
phase exactly when the phases' longer context becomes usable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .char_corpus import write_dataset
from .fairseq_dataset import finished_manifest

ALPHABET = b"abcdefghijklmnopqrstuvwxyz "


def generate(num_docs: int = 1200, period: int = 48, repeats: int = 4, seed: int = 0) -> np.ndarray:
    """Deterministic bytes: ``num_docs`` documents of ``period * repeats`` characters."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(np.frombuffer(ALPHABET, np.uint8), size=(num_docs, period))
    return np.tile(keys, (1, repeats)).reshape(-1)


def prepare_demo(out: Path, num_docs: int = 1200, period: int = 48, repeats: int = 4, seed: int = 0) -> dict:
    """Generate and binarize the demo corpus into ``out`` (80/10/10 split); idempotent."""
    out = Path(out)
    inputs = {"num_docs": num_docs, "period": period, "repeats": repeats, "seed": seed}
    previous = finished_manifest(out, "demo", inputs)
    if previous is not None:
        return previous
    data = generate(num_docs, period, repeats, seed)
    doc = period * repeats
    valid = test = (num_docs // 10) * doc
    return write_dataset(data, out, (len(data) - valid - test, valid, test), "demo", inputs)
