"""Imported at start by every Python process of a test that puts this folder on PYTHONPATH
(tests/test_cold_lane.py), when ``SLOW_BATCHES`` is set: batches take long to
load, so that fairseq's loader thread is inside a torch call (GIL released) whenever
training stops, as with a heavy collater or slow disks.

``SLOW_BATCHES``: ``clean``; ``no-stop``, the control, in which the plugin does not stop
the loader at exit, as fairseq alone does not; ``fail-rank-1``, in which process 1 fails
while loading its third batch.
"""

import os

MODE = os.environ.get("SLOW_BATCHES")

if MODE:
    import torch
    import torch.utils.data.dataloader as dataloader

    _next_data = dataloader._SingleProcessDataLoaderIter._next_data
    _loaded = [0]

    def slow_next_data(self):
        _loaded[0] += 1
        if MODE == "fail-rank-1" and os.environ.get("RANK") == "1" and _loaded[0] == 3:
            raise RuntimeError("rank 1 fails to load a batch (on purpose)")
        x = torch.randn(600, 600)
        for _ in range(30):  # about 0.2 s of matrix products, each a torch call without the GIL
            x = torch.tanh(x @ x)
        return _next_data(self)

    dataloader._SingleProcessDataLoaderIter._next_data = slow_next_data
    if MODE == "no-stop":
        from longformer_fs import launch

        launch.stop_batch_loaders = lambda: 0
