"""``export-onnx``: one pipeline for every kind of checkpoint it takes (:func:`export_onnx`).

A plan per kind (:data:`PLANS`; each an :class:`ExportPlan`) stages the output, loads the
model, writes, checks itself against the model and quantizes, through the steps the plans
share (:mod:`.onnx_trace`, :mod:`.onnx_quantize`, :mod:`longformer_fs.output`); the report
is the pipeline's. :class:`~.onnx_encoder.EncoderPlan` writes an encoder as one graph,
:class:`~.onnx_led.LedPlan` an LED as three.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import ClassVar, Protocol

from .. import output
from ..checkpoint import Checkpoint, Kind
from .errors import OnnxExportError
from .onnx_encoder import EncoderPlan, not_served
from .onnx_led import LedPlan
from .onnx_quantize import QUANTIZATIONS
from .onnx_trace import DEFAULT_OPSET, DTYPES


class ExportPlan(Protocol):
    """How one kind of checkpoint becomes ONNX: what :func:`export_onnx` asks of it, in order.

    Each step's refusals are :class:`~.errors.OnnxExportError`, in one line.
    """

    WHAT: ClassVar[str]  # what it exports, for messages ("an encoder")
    DTYPES: ClassVar[tuple[str, ...]]  # the --dtype values it writes

    def __init__(self, checkpoint: Checkpoint, dtype: str, tokenizer: Path | None = None): ...

    @staticmethod
    def staged(out: Path, report: dict, force: bool) -> contextlib.AbstractContextManager[Path]:
        """Where to write, through :mod:`longformer_fs.output` (a file, or a directory whose
        record is ``report``); a rerun from the same checkpoint refreshes it."""

    def describe(self) -> dict:
        """The report's lines on what is served: head, inputs and outputs or files, lengths."""

    def write(self, target: Path, opset: int, sources: dict) -> dict:
        """Trace and write the ONNX files at ``target``, recording ``sources`` (the inputs'
        stamps) where the format keeps them; returns more of the report."""

    def self_check(self, target: Path) -> dict:
        """Run the files by onnxruntime against the PyTorch model; the figures, or a refusal."""

    def quantize(self, target: Path) -> dict:
        """Quantize the files to int8 in place; what it costs against float32."""


def export_onnx(
    checkpoint: Path,
    out: Path,
    dtype: str = "float32",
    opset: int = DEFAULT_OPSET,
    force: bool = False,
    tokenizer: Path | None = None,
    quantize: str | None = None,
) -> dict:
    """Write ``checkpoint``'s model to the ONNX file ``out`` (:mod:`this module <.export>`),
    or, for an LED, the directory ``out`` (:mod:`.onnx_led`; ``tokenizer`` is where its
    tokenizer comes from, by default the checkpoint's directory). ``quantize="int8"``
    stores the linear layers' weights as int8 (:mod:`.onnx_quantize`); the self-check then
    reports its agreement with the float32 file.

    One path for every kind: the checkpoint's plan (:data:`PLANS`: :class:`EncoderPlan`, one
    graph; :class:`~.onnx_led.LedPlan`, three) is staged where ``out`` will be, loads the
    model, writes, checks itself against the model and quantizes; what it says goes into
    one report.

    Returns:
        The report: head, inputs and outputs (or files), lengths served, the self-check's
        figures.

    Raises:
        FileExistsError: ``out`` exists and ``force`` is not set.
        OnnxExportError: a checkpoint that cannot be served, or a self-check mismatch.
        CheckpointError: an unreadable checkpoint.
    """
    if dtype not in DTYPES:
        raise OnnxExportError(f"--dtype: {dtype!r}; choose one of {', '.join(DTYPES)}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise OnnxExportError(f"--quantize: {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
    if quantize and dtype != "float32":
        raise OnnxExportError(f"--quantize {quantize}: quantizes float32 weights; leave --dtype at float32")
    ours = Checkpoint.read(checkpoint)
    plan_type = PLANS.get(ours.kind)
    if plan_type is None:
        raise not_served(ours)
    if dtype not in plan_type.DTYPES:
        raise OnnxExportError(f"--dtype {dtype}: {plan_type.WHAT} exports in {' or '.join(plan_type.DTYPES)} only")
    report = {"checkpoint": str(checkpoint), "output": str(out), "inputs": output.sources(ours.path),
              "dtype": dtype, "quantize": quantize, "opset": opset}  # fmt: skip
    start = time.perf_counter()
    with plan_type.staged(Path(out), report, force) as target:  # the record (a directory's) is written last
        plan = plan_type(ours, dtype, tokenizer)
        report |= plan.describe()
        report |= plan.write(target, opset, report["inputs"])
        report["export_seconds"] = round(time.perf_counter() - start, 1)
        report["self_check"] = plan.self_check(target)
        if quantize:
            report["self_check"]["int8"] = plan.quantize(target)
        files = [target] if target.is_file() else sorted(target.glob("*.onnx"))
        report["megabytes"] = round(sum(f.stat().st_size for f in files) / 2**20, 1)
    return report


# Each kind of checkpoint export-onnx takes, and the plan that writes it.
PLANS: dict[Kind, type[ExportPlan]] = {Kind.ENCODER: EncoderPlan, Kind.LED: LedPlan}
