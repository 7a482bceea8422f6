"""Compiled layers for training: one ``torch.compile`` region per layer type.

A layer whose forward is decorated with :func:`compiled_in_training` runs it, while it
trains with ``compile_layers`` set, through one compiled function shared by every layer of
that type: ``torch.compile`` of the undecorated forward, called with the layer. Layers of
one type and one setting share a graph; a layer with another window is another graph (and
fairseq's decoder layers one each: see ``longformer_fs.models.led``), so a model compiles
as many graphs as it has distinct layer settings, each twice (the first length static, the
next ones under one dynamic shape), however many lengths its batches bring. Evaluation and
generation run eagerly: incremental decoding would bring a new shape at every step.

The attention inside traces whole: the backends are traceable (custom ops with fake
implementations, or plain PyTorch), and global tokens under a bound have no
data-dependent shape (``--max-global-tokens``, or the count a task's batches carry).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import torch

from .. import devices

# What compiles the layers: None for the device's compiler (longformer_fs.devices.compiler:
# inductor, or aot_eager in a rehearsal); the tests put a graph-counting backend here.
BACKEND = None
# Graphs a layer setting may take (static, dynamic, and each for grad mode and dtype):
# dynamo's recompile limit is raised to this many per distinct setting of a model.
GRAPHS_PER_SETTING = 4


@functools.cache
def compiled(forward: Callable, backend) -> Callable:
    """``forward`` (a layer class's unbound forward) compiled once per process and compiler."""
    return torch.compile(forward, backend=backend)


def allow_graphs(settings: int) -> None:
    """Let dynamo keep a graph for each of ``settings`` distinct layer settings of a model
    (per-layer windows, say) without reaching its recompile limit, past which it would run
    the rest eagerly."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, GRAPHS_PER_SETTING * settings)


def compiled_in_training(forward: Callable) -> Callable:
    """Decorate a layer type's forward: compiled (one function for the type) while a layer of
    it trains with ``compile_layers``, eager otherwise. The layer's ``compile_layers``
    attribute is set by the model that builds it (False when absent).

    A layer may define ``prepare_compiled(*args, **kwargs)``, a context entered around each
    compiled call with the call's arguments: there its attention builds what its backend reads
    once per geometry (flex's tile lists, :meth:`~longformer_fs.attention.functional.PreparesBand.band_prepared`),
    which the graph then takes as an input. Traced inside, it would be built again, on the
    host and copied to the device, at every call."""

    @functools.wraps(forward)
    def layer_forward(self, *args, **kwargs):
        if getattr(self, "compile_layers", False) and self.training and not torch.compiler.is_compiling():
            # Contiguous inputs (a no-op for most): a graph is traced for its inputs' strides,
            # and fairseq hands its first layer a transposed view, the others fresh tensors.
            args = [x.contiguous() if isinstance(x, torch.Tensor) else x for x in args]
            kwargs = {k: x.contiguous() if isinstance(x, torch.Tensor) else x for k, x in kwargs.items()}
            device = next((x.device for x in args if isinstance(x, torch.Tensor)), None)
            prepare = getattr(self, "prepare_compiled", None)
            with prepare(*args, **kwargs) if prepare is not None else contextlib.nullcontext():
                return compiled(forward, BACKEND or devices.compiler(device))(self, *args, **kwargs)
        return forward(self, *args, **kwargs)

    return layer_forward
