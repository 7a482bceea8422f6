"""Tokenizing in worker processes: each process loads the tokenizer once.

``prep docs`` and ``prep summarization`` hand batches of text to a pool whose workers each
hold the tokenizer; the functions they map read it with :func:`process_encoder`. With one
worker there is no pool and the same functions run in the parent, which loads the
tokenizer first (bad tokenizer files are reported there, by name, before any work).
"""

from __future__ import annotations

import multiprocessing
import os
import signal

from longformer_fs.tokenization import SubwordSpec

_ENCODER: dict = {}  # this process's tokenizer, under "encoder"


def load_encoder(subword: SubwordSpec):
    """Load ``subword``'s tokenizer into this process and return it."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # processes are the parallelism
    _ENCODER["encoder"] = subword.load()
    return _ENCODER["encoder"]


def process_encoder():
    """The tokenizer :func:`load_encoder` loaded into this process."""
    return _ENCODER["encoder"]


def tokenizer_pool(workers: int, subword: SubwordSpec):
    """A pool of ``workers`` processes, each holding ``subword``'s tokenizer; None for one worker.

    Workers are spawned (tokenizers' Rust threads and fork do not mix) and ignore Ctrl-C:
    the parent stops the run and its pool, with one message rather than one per worker.
    """
    if workers < 2:
        return None
    return multiprocessing.get_context("spawn").Pool(workers, _start_worker, (subword,))


def _start_worker(subword: SubwordSpec) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    load_encoder(subword)
