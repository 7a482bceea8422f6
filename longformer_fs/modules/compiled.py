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

import functools
from typing import Callable

import torch

# What compiles the layers; the tests trace with "aot_eager" (dynamo and AOTAutograd as
# inductor receives them, without its code generation).
BACKEND = "inductor"
# Graphs a layer setting may take (static, dynamic, and each for grad mode and dtype):
# dynamo's recompile limit is raised to this many per distinct setting of a model.
GRAPHS_PER_SETTING = 4


@functools.cache
def compiled(forward: Callable) -> Callable:
    """``forward`` (a layer class's unbound forward) compiled once per process."""
    return torch.compile(forward, backend=BACKEND)


def allow_graphs(settings: int) -> None:
    """Let dynamo keep a graph for each of ``settings`` distinct layer settings of a model
    (per-layer windows, say) without reaching its recompile limit, past which it would run
    the rest eagerly."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, GRAPHS_PER_SETTING * settings)


def compiled_in_training(forward: Callable) -> Callable:
    """Decorate a layer type's forward: compiled (one function for the type) while a layer of
    it trains with ``compile_layers``, eager otherwise. The layer's ``compile_layers``
    attribute is set by the model that builds it (False when absent)."""

    @functools.wraps(forward)
    def layer_forward(self, *args, **kwargs):
        if getattr(self, "compile_layers", False) and self.training and not torch.compiler.is_compiling():
            # Contiguous inputs (a no-op for most): a graph is traced for its inputs' strides,
            # and fairseq hands its first layer a transposed view, the others fresh tensors.
            args = [x.contiguous() if isinstance(x, torch.Tensor) else x for x in args]
            kwargs = {k: x.contiguous() if isinstance(x, torch.Tensor) else x for k, x in kwargs.items()}
            return compiled(forward)(self, *args, **kwargs)
        return forward(self, *args, **kwargs)

    return layer_forward
