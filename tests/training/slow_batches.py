"""Run by tests/training/test_distributed.py under torchrun: ``longformer_fs.launch``, with
batches that take long to load, so that fairseq's loader thread is inside a torch call
(GIL released) whenever training stops, as with a heavy collater or slow disks.

Arguments: ``clean|no-stop|fail-rank-1``, then the launcher's. ``no-stop`` (the control)
leaves the loader running at exit, as fairseq alone does; ``fail-rank-1`` makes process 1
fail while loading its third batch.
"""

import os
import sys

import torch
import torch.utils.data.dataloader as dataloader

from longformer_fs import launch

MODE = sys.argv.pop(1)
_next_data = dataloader._SingleProcessDataLoaderIter._next_data
loaded = 0


def slow_next_data(self):
    global loaded
    loaded += 1
    if MODE == "fail-rank-1" and os.environ["RANK"] == "1" and loaded == 3:
        raise RuntimeError("rank 1 fails to load a batch (on purpose)")
    x = torch.randn(600, 600)
    for _ in range(30):  # about 0.2 s of matrix products, each a torch call without the GIL
        x = torch.tanh(x @ x)
    return _next_data(self)


dataloader._SingleProcessDataLoaderIter._next_data = slow_next_data
if MODE == "no-stop":
    launch.stop_batch_loaders = lambda: 0

if __name__ == "__main__":
    sys.exit(launch.main())
