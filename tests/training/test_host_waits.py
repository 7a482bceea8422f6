"""A training step in which the host never waits for the device, for each model.

On a GPU the host queues kernels ahead of the device; a step runs at the device's speed only
while it does. Whatever needs a value of a device tensor on the host (``.item()``,
``bool(t)``, ``int(t)``, ``tolist()``, an output whose shape depends on data) makes it wait,
and a copy from the host each step waits on the transfer. Neither needs a GPU to be seen:
on any device they reach aten as the ops :class:`HostWaits` counts, and a step on the
``meta`` device shows a tensor made on the host and copied into the step. The third cost
the issue names, an accumulating scatter over a sequence-long index (serial on CUDA where
its indices repeat), is an op too.

Each model is built, as ``fairseq-train`` builds it, from its task and its arguments, and
takes the batch its task's collater makes (LED's source left-padded, as fairseq's
translation task pads it; the QA batch with its question as the global tokens); one step
is the criterion's forward and the backward (``task.train_step``). The first step of a shape
may build what later steps reuse; the second is counted.
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path

import pytest
import torch
from model_steps import MODELS, to_device, train_step
from torch.utils._python_dispatch import TorchDispatchMode

READ_BACKS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default"}
ACCUMULATING = {"aten.index_put_.default", "aten._index_put_impl_.default", "aten.index_put.default"}
SCATTER_ADDS = {"aten.index_add.default", "aten.index_add_.default", "aten.scatter_add.default",
                "aten.scatter_add_.default", "aten.index_reduce.default"}  # fmt: skip


class HostWaits(TorchDispatchMode):
    """Counts, by op: read-backs, copies from the host into another device, and accumulating
    scatters whose index is at least ``seq_len`` long."""

    def __init__(self, seq_len: int):
        super().__init__()
        self.seq_len = seq_len
        self.read_backs: Counter = Counter()
        self.copies_in: Counter = Counter()
        self.scatters: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name in READ_BACKS:
            self.read_backs[f"{name} at {_caller()}"] += 1
        # Sequence-long: an index whose extent along the accumulated dimension reaches T
        # (index_put's indices broadcast to (B, n): n).
        if name in ACCUMULATING and (args[3] if len(args) > 3 else kwargs.get("accumulate", False)):
            if any(i is not None and i.dim() and i.shape[-1] >= self.seq_len for i in args[1]):
                self.scatters[f"{name} at {_caller()}"] += 1
        if name in SCATTER_ADDS and args[2].dim() and args[2].shape[args[1]] >= self.seq_len:
            self.scatters[f"{name} at {_caller()}"] += 1
        out = func(*args, **kwargs)
        tensors = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        if any(x.device.type == "cpu" and x.dim() > 0 for x in tensors) and any(
            isinstance(o, torch.Tensor) and o.device.type == "meta" for o in outputs
        ):
            self.copies_in[f"{name} at {_caller()}"] += 1
        return out


def _caller() -> str:
    """The innermost frame of the step outside torch and this file: where the cost is."""
    for frame in reversed(traceback.extract_stack()):
        if "/torch/" not in frame.filename and not frame.filename.endswith(("test_host_waits.py", "contextlib.py")):
            return f"{Path(frame.filename).name}:{frame.lineno} ({frame.name})"
    return "?"


def count_step(task, model, criterion, sample, seq_len: int, device: str = "cpu") -> HostWaits:
    """Two training steps on ``device``; what the second one did."""
    model.to(device)
    sample = to_device(sample, device)
    train_step(task, model, criterion, sample, update=0)  # builds what a shape reuses
    with HostWaits(seq_len) as waits:
        train_step(task, model, criterion, sample, update=1)
    return waits


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_never_reads_back_from_the_device(name, tmp_path):
    task, model, criterion, sample, seq_len = MODELS[name](tmp_path)
    waits = count_step(task, model, criterion, sample, seq_len)
    assert not waits.read_backs, f"{name}: the host waits on {dict(waits.read_backs)}"
    assert not waits.scatters, f"{name}: accumulating scatters over the sequence: {dict(waits.scatters)}"


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_copies_nothing_from_the_host(name, tmp_path):
    """On ``meta`` every tensor the step makes on the host is seen when it meets the model's."""
    task, model, criterion, sample, seq_len = MODELS[name](tmp_path)
    waits = count_step(task, model, criterion, sample, seq_len, device="meta")
    assert not waits.copies_in, f"{name}: copies from the host into the step: {dict(waits.copies_in)}"


def test_the_counter_sees_what_it_counts():
    """The counter itself, on the three kinds of cost it exists to see."""
    x = torch.arange(10.0)
    with HostWaits(seq_len=10) as waits:
        bool(x.sum() > 3)
        x.nonzero()
        torch.zeros(10).index_put_((torch.zeros(10, dtype=torch.long),), torch.ones(10), accumulate=True)
        torch.zeros(3).index_add_(0, torch.zeros(10, dtype=torch.long), torch.ones(10))
        torch.ones(4, device="meta") + torch.tensor([1.0, 2.0, 3.0, 4.0]).to("meta")
    assert sorted(name.split(" at ")[0] for name in waits.read_backs) == [
        "aten._local_scalar_dense.default",
        "aten.nonzero.default",
    ]
    assert sum(waits.scatters.values()) == 2
    assert sum(waits.copies_in.values()) == 1
