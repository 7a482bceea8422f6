"""The tracing step every ONNX export shares: a module and example inputs in, an ONNX
program out (:func:`export_graph`), through ``torch.export`` with dynamic sizes and torch's
ONNX exporter, our operators translated (:mod:`.onnx_translations`) and its chatter kept
out of the command's output (:func:`quiet_exporter`).

Used by the encoder's one graph (:mod:`.onnx`) and the LED's three (:mod:`.onnx_led`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import torch
import torch.nn as nn
import torch.onnx

from .onnx_translations import TRANSLATIONS

DEFAULT_OPSET = 18
# The --dtype values of export-onnx, and the torch dtypes a graph is traced in.
DTYPES = {"float32": torch.float32, "float16": torch.float16}


@contextlib.contextmanager
def quiet_exporter():
    """torch's exporter warns of what does not concern a user here (torchvision's ops it
    skips, axis names it merges, the per-batch global masks the layers hold): the command's
    output stays its own."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def export_graph(graph: nn.Module, args: tuple, input_names: list[str], output_names: list[str], dynamic_shapes,
                 opset: int = DEFAULT_OPSET):  # fmt: skip
    """The ONNX program of ``graph`` called on ``args``, its sizes dynamic as
    ``dynamic_shapes`` says (``torch.export``'s form), its inputs and outputs named."""
    with quiet_exporter():
        return torch.onnx.export(
            graph, args, input_names=input_names, output_names=output_names, dynamic_shapes=dynamic_shapes,
            custom_translation_table=TRANSLATIONS, opset_version=opset, dynamo=True, verbose=False,
        )  # fmt: skip
