import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# A 2-layer longformer_lm_small for fairseq-train runs on CPU: the plugin, the task and the
# shape (dilated heads and geometric windows included, so both are exercised).
TINY_CHAR_LM = [
    "--user-dir", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "longformer_fs"),
    "--task", "longformer_char_lm", "--arch", "longformer_lm_small",
    "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
    "--decoder-attention-heads", "4", "--dilated-heads", "2",
    "--attention-window", "4:16", "--attention-dilation", "1,2", "--tokens-per-sample", "64",
]  # fmt: skip

BAND_BACKENDS = [pytest.param(name, id=name) for name in ("reference", "chunks", "kernel")]


def backend_or_skip(name):
    from longformer_fs.attention import available_backends

    if name not in available_backends():
        pytest.skip(f"backend {name!r} not available here")
    return name


def cli(*args):
    """``longformer-fs ARGS`` in this process (no interpreter start-up): a CompletedProcess
    with the exit code and what was printed. Commands catch user errors themselves."""
    import contextlib
    import io
    import subprocess

    from longformer_fs.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse errors
            code = exit_.code
    return subprocess.CompletedProcess(["longformer-fs", *map(str, args)], code, out.getvalue(), err.getvalue())
