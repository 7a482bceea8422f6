import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


BAND_BACKENDS = [pytest.param(name, id=name) for name in ("reference", "chunks", "kernel")]


def backend_or_skip(name):
    from longformer_fs.attention import available_backends

    if name not in available_backends():
        pytest.skip(f"backend {name!r} not available here")
    return name
