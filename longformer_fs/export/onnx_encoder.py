"""``export-onnx`` of an encoder: a ``longformer_roberta`` checkpoint as one ONNX file that
serves every batch size, every length up to the model's positions and every global pattern.

How: the model (:class:`~.onnx_served.ServedModel`) is traced by ``torch.export`` with a
dynamic batch and length, its attention on the ``kernel`` backend, whose op is opaque to
the trace and becomes ONNX operators through :mod:`.onnx_band`; the global tokens' count is a
size the graph computes at run time. torch's ONNX exporter writes the file. Before the
file reaches ``--out`` it is run by onnxruntime against the PyTorch model on random
inputs of several lengths, global patterns and padding (:func:`self_check`): a file that
disagrees never lands. :class:`EncoderPlan` is this graph's :class:`~.onnx.ExportPlan`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import output
from ..checkpoint import Checkpoint, Kind
from ..heads import HEADS, Head
from ..serving.sessions import cpu_session
from .errors import OnnxExportError
from .onnx_quantize import float_copy, quantize_file, top1_agreement
from .onnx_served import INPUTS, ServedModel, refuse_dilated
from .onnx_trace import DEFAULT_OPSET, DTYPES, export_graph

# How far onnxruntime may be from the float32 PyTorch model, relative to the largest
# output (float16 rounds each of the model's steps to 3 significant digits).
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}


def served_heads() -> str:
    """The heads an encoder's file can end in, for messages: ``masked_lm, classification, qa``."""
    return ", ".join(kind for kind, spec in HEADS.items() if spec.onnx_outputs)


def not_served(checkpoint: Checkpoint) -> OnnxExportError:
    """The error for a checkpoint of a kind export-onnx does not take, naming the kinds it does."""
    return OnnxExportError(
        f"checkpoint: {checkpoint.path} is a {checkpoint.name!r} model; export-onnx takes longformer_roberta "
        f"checkpoints ({served_heads()}) and led checkpoints"
    )


def served_head(checkpoint: Checkpoint) -> Head:
    """The head the checkpoint's graph ends in, or :class:`OnnxExportError` naming the one it has."""
    served = served_heads()
    if checkpoint.kind is not Kind.ENCODER:
        raise not_served(checkpoint)
    try:
        head = checkpoint.head
    except ValueError as err:
        raise OnnxExportError(f"{err}; export-onnx serves one: {served}") from None
    if not head.spec.onnx_outputs:
        raise OnnxExportError(
            f"checkpoint: {checkpoint.path} ends in {head.spec.what}; export-onnx serves the heads {served}"
        )
    return head


@dataclass
class Exported:
    """A checkpoint's model ready to export, and what the report says of it."""

    served: ServedModel
    head: Head
    max_length: int
    window: list[int]


def load_served(checkpoint: Path | Checkpoint) -> Exported:
    """The checkpoint's model as the graph serves it, on CPU in float32."""
    if not isinstance(checkpoint, Checkpoint):
        checkpoint = Checkpoint.read(checkpoint)
    head = served_head(checkpoint)
    model, _ = checkpoint.load("cpu")
    served = ServedModel(model, head).eval()
    encoder = served.encoder
    refuse_dilated(encoder, checkpoint.path)
    return Exported(served, head, encoder.max_positions(), [a.window for a in encoder.attention_modules()])


class EncoderPlan:
    """A ``longformer_roberta`` checkpoint as one ONNX file (:mod:`this module <.export>`)."""

    WHAT = "an encoder"
    DTYPES = tuple(DTYPES)

    def __init__(self, checkpoint: Checkpoint, dtype: str, tokenizer: Path | None = None):
        self.exported, self.dtype = load_served(checkpoint), dtype
        self.check: dict = {}

    @staticmethod
    def staged(out: Path, report: dict, force: bool):
        """The file is written beside ``out``; a file of its own export from the same
        checkpoint (its metadata says) is refreshed without ``force``."""
        recorded = recorded_sources(out) if out.is_file() else None
        rerun = recorded is not None and output.stamped_files(recorded) == output.stamped_files(report["inputs"])
        return output.guarded_file(out, force, rerun=rerun)

    def describe(self) -> dict:
        exported = self.exported
        return {"head": str(exported.head), "onnx_inputs": list(INPUTS),
                "onnx_outputs": list(exported.head.spec.onnx_outputs),
                "max_length": exported.max_length}  # fmt: skip

    def write(self, target: Path, opset: int, sources: dict) -> dict:
        exported = self.exported
        # The float32 model is the self-check's reference; a float16 export traces a copy.
        served = exported.served if self.dtype == "float32" else copy.deepcopy(exported.served).to(DTYPES[self.dtype])
        program = trace(served, exported.max_length, opset)
        program.model.metadata_props[RECORD] = json.dumps(sources)
        program.save(str(target))
        return {}

    def self_check(self, target: Path) -> dict:
        exported = self.exported
        self.check = self_check(target, exported.served, exported.max_length, exported.window, TOLERANCE[self.dtype])
        return self.check

    def quantize(self, target: Path) -> dict:
        """The int8 file's top-1 agreement with the float32 one, on the self-check's lengths
        and patterns, :data:`AGREEMENT_BATCH` rows each."""
        exported = self.exported
        batches = [example_inputs(exported.served, AGREEMENT_BATCH, n, pattern, padded=True, seed=n)
                   for n in self.check["lengths"] for pattern in self.check["patterns"]]  # fmt: skip
        with float_copy(target) as reference:
            quantize_file(target)
            return top1_agreement(reference, target, batches, list(exported.head.spec.onnx_outputs))


# The file's record of what it was exported from (its metadata), which lets a rerun from
# the same checkpoint refresh it (output.guarded_file's ``rerun``).
RECORD = "longformer_fs.export-onnx"


def recorded_sources(path: Path) -> dict | None:
    """The inputs (:func:`~longformer_fs.output.sources`) that the ONNX file
    ``path`` records it was exported from, or None: another file, or not ONNX."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
        value = next((entry.value for entry in model.metadata_props if entry.key == RECORD), None)
        return None if value is None else json.loads(value)
    except Exception:  # protobuf's decode errors and any other unreadable file: not our record
        return None


def trace(served: ServedModel, max_length: int, opset: int = DEFAULT_OPSET):
    """The ONNX program of ``served`` with a dynamic batch and a length from 1 to ``max_length``."""
    batch = torch.export.Dim("batch", min=1, max=4096)
    length = torch.export.Dim("length", min=1, max=max_length)
    example = example_inputs(served, batch=2, length=min(max_length, 50), pattern="some", padded=True)
    return export_graph(served, tuple(torch.from_numpy(example[name]) for name in INPUTS), list(INPUTS),
                        list(served.head.spec.onnx_outputs), {name: {0: batch, 1: length} for name in INPUTS},
                        opset)  # fmt: skip


# Rows a (length, global pattern) the int8 agreement is measured on: a span's start or a
# class is one argmax a row, and 3 lengths x 4 patterns x 16 rows make 192 of them, where
# 2 rows a batch made 24, too few to tell 90% from 100%.
AGREEMENT_BATCH = 16


def example_inputs(served: ServedModel, batch: int, length: int, pattern: str, padded: bool, seed: int = 0) -> dict:
    """Random ``{input name: int64 array (batch, length)}``: tokens of the model's
    vocabulary, rows after the first padded past half their length when ``padded``, and
    ``pattern`` of global tokens: ``none``, ``one`` (the first), ``some`` (every 5th) or
    ``all``."""
    generator = np.random.default_rng(seed)
    dictionary = served.encoder.dictionary
    ids = generator.integers(dictionary.nspecial, len(dictionary), size=(batch, length))
    ids[:, 0] = dictionary.bos()
    attention = np.ones((batch, length), dtype=np.int64)
    if padded:
        attention[1:, length // 2 + 1 :] = 0
        ids[attention == 0] = dictionary.pad()
    glob = np.zeros((batch, length), dtype=np.int64)
    glob[:, {"none": slice(0), "one": slice(0, 1), "some": slice(None, None, 5), "all": slice(None)}[pattern]] = 1
    return {"input_ids": ids.astype(np.int64), "attention_mask": attention, "global_attention_mask": glob}


def check_lengths(max_length: int, windows: list[int]) -> list[int]:
    """Lengths the self-check runs: 1, past the widest window and not a multiple of it,
    and a longer one, within ``max_length``."""
    w = max(windows)
    return sorted({min(n, max_length) for n in (1, 2 * w + 3, 6 * w + 7)})


def self_check(path: Path, served: ServedModel, max_length: int, windows: list[int], tolerance: float) -> dict:
    """Run the file in onnxruntime against ``served`` (float32 PyTorch) on random inputs.

    Returns:
        ``{"lengths", "patterns", "max_difference", "tolerance"}``, the difference relative
        to the largest output.

    Raises:
        OnnxExportError: an output further than ``tolerance`` from PyTorch's, with the numbers.
    """
    session = cpu_session(path)
    worst, lengths, patterns = 0.0, check_lengths(max_length, windows), ("none", "one", "some", "all")
    for length in lengths:
        for pattern in patterns:
            inputs = example_inputs(served, batch=2, length=length, pattern=pattern, padded=True, seed=length)
            got = session.run(None, inputs)
            with torch.no_grad():
                want = served(*(torch.from_numpy(inputs[name]) for name in INPUTS))
            want = [w.float().numpy() for w in (want if isinstance(want, tuple) else (want,))]
            for name, (g, w) in zip(served.head.spec.onnx_outputs, zip(got, want, strict=True), strict=True):
                difference = float(np.abs(g.astype(np.float32) - w).max() / max(1.0, float(np.abs(w).max())))
                if not difference <= tolerance:  # a NaN fails too
                    raise OnnxExportError(
                        f"self-check: onnxruntime's {name} differs from PyTorch's by {difference:.2e} of its "
                        f"largest value (tolerance {tolerance:.0e}) at length {length}, global pattern {pattern!r}; "
                        "nothing written"
                    )
                worst = max(worst, difference)
    return {"lengths": lengths, "patterns": list(patterns), "max_difference": worst, "tolerance": tolerance}
