"""Fixtures the tests share. The tiny corpora and models are session fixtures: each is
built or trained once per pytest run, when a test first asks for it, and read (never
changed) by every test that asks for it after. Functions and constants the tests share
are in helpers.py."""

import os
import sys
import zipfile

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from helpers import BIN, CHAR_SPLITS, ON_CPU, TINY_ROBERTA, char_lm_logs, cli, run, runs_text  # noqa: E402

__all__ = ["BAND_BACKENDS", "backend_or_skip", "cli"]  # what tests import from here


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


BAND_BACKENDS = [pytest.param(name, id=name) for name in ("reference", "chunks", "kernel")]


def backend_or_skip(name):
    from longformer_fs.attention import available_backends

    if name not in available_backends():
        pytest.skip(f"backend {name!r} not available here")
    return name


# ---------------------------------------------------------------- tiny corpora and models


@pytest.fixture(scope="session")
def char_corpus(tmp_path_factory):
    """A tiny text8 prepared by ``longformer-fs prep``'s code: 16,000 / 2,000 / 2,000
    characters (CHAR_SPLITS) of ten short words. Its directory is named text8, so its
    parent is a DATA directory for the Makefile's text8 targets."""
    from data_prep.char_corpus import prepare

    tmp = tmp_path_factory.mktemp("char_corpus")
    rng = np.random.default_rng(0)
    words = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far"]
    text = b" ".join(words[i] for i in rng.integers(0, len(words), 6000))[: sum(CHAR_SPLITS)]
    with zipfile.ZipFile(tmp / "text8.zip", "w") as archive:
        archive.writestr("text8", text)
    prepare("text8", tmp / "data" / "text8", tmp / "text8.zip", verify=False, split_sizes=CHAR_SPLITS)
    return tmp / "data" / "text8"


@pytest.fixture(scope="session")
def tiny_char_lm(char_corpus, tmp_path_factory):
    """TINY_CHAR_LM trained 40 updates by fairseq-train on char_corpus, validated after each
    epoch: its checkpoint_last.pt and the run's (train_inner | valid, entry) log lines."""
    save = tmp_path_factory.mktemp("tiny_char_lm")
    logs = char_lm_logs(char_corpus, "--max-update", "40", "--save-dir", save, "--no-epoch-checkpoints")
    return save / "checkpoint_last.pt", logs


@pytest.fixture(scope="session")
def runs_corpus(tmp_path_factory):
    """fairseq-preprocess'd text of 16 words repeated in runs of 3 to 6 (helpers.runs_text),
    60,000 words to train and 12,000 to validate: a masked word is its neighbours' word,
    which a model can only find if it knows where its neighbours are (positions)."""
    tmp = tmp_path_factory.mktemp("runs_corpus")
    (tmp / "train.txt").write_text(runs_text(60000, 0))
    (tmp / "valid.txt").write_text(runs_text(12000, 1))
    run(BIN / "fairseq-preprocess", "--only-source", "--trainpref", tmp / "train.txt", "--validpref",
        tmp / "valid.txt", "--destdir", tmp / "bin", "--workers", "1")  # fmt: skip
    return tmp / "bin"


@pytest.fixture(scope="session")
def tiny_roberta(runs_corpus, tmp_path_factory):
    """A released-RoBERTa-like directory (model.pt and dict.txt): a 2-layer RoBERTa with 128
    positions trained 1,000 updates by fairseq-train on runs_corpus. It has learned
    locality: under 2 bits per masked token (uniform guessing is 4)."""
    save = tmp_path_factory.mktemp("tiny_roberta")
    run(BIN / "fairseq-train", runs_corpus, "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta",
        *TINY_ROBERTA, "--max-positions", "128", "--tokens-per-sample", "128", "--sample-break-mode", "none",
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "5e-3", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "100", "--clip-norm", "1.0", "--batch-size", "16", "--max-update", "1000",
        "--dropout", "0", "--attention-dropout", "0", "--save-dir", save, "--no-epoch-checkpoints",
        "--disable-validation", "--seed", "1", *ON_CPU, "--log-format", "simple", "--log-interval", "100")  # fmt: skip
    (save / "checkpoint_last.pt").rename(save / "model.pt")
    (save / "dict.txt").write_bytes((runs_corpus / "dict.txt").read_bytes())
    return save
