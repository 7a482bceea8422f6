"""What a rehearsal watches a step do: the host reading the device's values, and copies from the host.

Inside :func:`longformer_fs.devices.rehearsal`, the meta device stands for an sm90 GPU. Meta
tensors hold no values, so every read of one by the host fails there. On a GPU the same read
would make the host wait. :class:`HostWatch` sees each such read before it fails, and the code
it comes from (:func:`site`):

- a read of ours raises :class:`RehearsalFailure` when the watch is ``strict`` (CI's rehearsal of
  the recipes' steps). Otherwise it is counted and answered, like the others;
- a read of other code (fairseq's loss scaler, the MLM criterion's masked gather, HF's and
  fairseq's models in the report's comparisons) is counted and answered (:func:`answer`). A
  GPU makes those reads too.

Copies from the host into the device are counted by site, ours apart from the others'.

A read is ``.item()``, ``bool(t)``, ``int(t)`` or ``float(t)`` (aten's ``_local_scalar_dense``),
a copy to the host, or an op whose output shape depends on values (``nonzero``, a boolean-mask
index). Ops of the backward are put down to the forward op whose gradient they compute (anomaly
mode keeps each autograd node's forward stack). Otherwise every op of the backward would come
from whoever called ``backward()``, usually fairseq's optimizer.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Frames that are the watch's machinery, never the site of an op.
_MACHINERY = ("/torch/", "/contextlib.py", "/functools.py", "longformer_fs/rehearsal.py")
# Code that is not ours: its reads are answered, and a GPU makes them too.
_THEIRS = ("/fairseq/", "/fairseq_cli/", "/transformers/")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# What reading one value dispatches: ``_local_scalar_dense`` in autograd mode; under
# inference mode ``bool(t)`` and ``t.item()`` arrive whole, as these.
_SCALAR_READS = ("aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.item.default")


class RehearsalFailure(AssertionError):
    """What a step did that would fail, or make the host wait, on a GPU."""


@dataclass(frozen=True)
class Site:
    """Where an op comes from: ``where`` (``file.py:line (function)``), whose code it is (``ours``),
    and its path."""

    where: str
    ours: bool
    path: str = ""


def site() -> Site:
    """The site of the op being dispatched: the innermost frame outside torch and the watch,
    of the forward op's stack for an op of the backward."""
    node = torch._C._current_autograd_node()
    stack = node.metadata.get("traceback_") if node is not None else None
    if stack:
        frames = [(m.group(1), m.group(2), m.group(3)) for m in map(_FRAME.search, stack) if m]
    else:
        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_stack()]
    for path, line, function in reversed(frames):
        if any(part in path for part in _MACHINERY):
            continue
        return Site(f"{Path(path).name}:{line} ({function})", not any(part in path for part in _THEIRS), path)
    return Site("?", True)


def reads_back(func, args, kwargs) -> str | None:
    """What ``func`` needs of the device's values, in words, or None when nothing (a read of a
    host tensor's values, such as a shape held in one, waits for nothing)."""
    if not any(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in (*args, *kwargs.values())):
        indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
        if not any(isinstance(i, torch.Tensor) and i.device.type == "meta" for i in indices):
            return None
    name = str(func)
    if name in _SCALAR_READS:
        return "a value read back (.item(), bool(), int(), float())"
    if name in ("aten.nonzero.default", "aten.masked_select.default", "aten.nonzero_static.default"):
        return f"an output whose shape depends on values ({name})"
    if name.startswith(("aten.index.Tensor", "aten.index_put")):
        indices = args[1] if len(args) > 1 else ()
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()):
            return f"a boolean-mask index, whose shape depends on values ({name})"
    if name in ("aten._to_copy.default", "aten.copy_.default"):
        source, target = (args[1], args[0]) if name == "aten.copy_.default" else (args[0], None)
        to_host = kwargs.get("device") == torch.device("cpu") if target is None else target.device.type == "cpu"
        if isinstance(source, torch.Tensor) and source.device.type == "meta" and to_host:
            return "a copy from the device to the host"
    return None


def answer(func, args, where: Site):
    """What a GPU gives a read in the common case, or None to let the op run (a boolean-mask
    index then keeps every element: meta's nonzero takes every element as nonzero).

    A flag of ours is True, the branch that does more (there are global tokens). Other code's
    flags are False, its plainest path: fairseq's loss scaler sees no overflow and its clip a
    norm under the clip, its decoders no padding, HF's models no global token. (Their paths
    are not ours to rehearse, and their figures are numbers, which meta has none of.) A count
    is 1, a value 1.0. A copy to the host is zeros of its shape.
    """
    name = str(func)
    if name in _SCALAR_READS:
        dtype = torch.bool if name == "aten.is_nonzero.default" else args[0].dtype
        if dtype == torch.bool:
            return where.ours
        return 1.0 if dtype.is_floating_point else 1
    if name == "aten._to_copy.default":
        return torch.zeros(args[0].shape, dtype=args[0].dtype)
    if name == "aten.copy_.default":
        return args[0]
    return None


class HostWatch(TorchDispatchMode):
    """Watches the ops run inside on the rehearsal's device (see the module docstring).

    Args:
        name: what is watched (a recipe, a part), the start of every failure's message.
        strict: a read of ours raises :class:`RehearsalFailure`; otherwise it is answered.

    Attributes:
        reads, copies: ``{"op at site": count}``, ours; ``their_reads``, ``their_copies``: the rest's.
    """

    # FlexAttention is a higher-order op: it passes through whole (its own ops unwatched: on
    # meta they are the dense path that stands in for its kernel).
    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """dynamo compiles under the watch (it skips frames under any other mode), and the
        compiled code's ops pass through it when they run (``aot_eager`` runs aten's ops)."""
        return True

    def __init__(self, name: str, strict: bool = True):
        super().__init__()
        self.name, self.strict = name, strict
        self.reads: Counter = Counter()
        self.copies: Counter = Counter()
        self.their_reads: Counter = Counter()
        self.their_copies: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        what = reads_back(func, args, kwargs)
        if what is not None:
            where = site()
            if where.ours and self.strict:
                raise RehearsalFailure(f"{self.name}: {what} at {where.where}: on a GPU the host waits for the device")
            (self.reads if where.ours else self.their_reads)[f"{func} at {where.where}"] += 1
            answered = answer(func, args, where)
            if answered is not None:
                return answered
        out = func(*args, **kwargs)
        inputs = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        if any(x.device.type == "cpu" and x.dim() > 0 for x in inputs) and any(
            isinstance(o, torch.Tensor) and o.device.type == "meta" for o in outputs
        ):
            where = site()
            (self.copies if where.ours else self.their_copies)[f"{func} at {where.where}"] += 1
        return out


@contextlib.contextmanager
def watched(name: str, strict: bool = True) -> Iterator[HostWatch]:
    """A :class:`HostWatch` over the block, meta's nonzero taking every element as nonzero, and
    any other exception raised again as a :class:`RehearsalFailure` naming where it came from.

    A strict watch runs anomaly mode, whose forward stacks name the sites of the backward's ops
    (a read of ours in a backward must fail, not pass as its caller's). A lenient one only
    counts, and names a backward's op by its caller: anomaly mode keeps a stack for every op of
    the forward, which doubles a step's time."""
    config = torch.fx.experimental._config
    saved = config.meta_nonzero_assume_all_nonzero
    config.meta_nonzero_assume_all_nonzero = True
    watch = HostWatch(name, strict)
    stacks = torch.autograd.detect_anomaly(check_nan=False) if strict else contextlib.nullcontext()
    try:
        with stacks, watch:
            yield watch
    except RehearsalFailure:
        raise
    except Exception as err:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if not any(m in f.filename for m in _MACHINERY)]
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else ""
        message = str(err).splitlines()[0][:400] if str(err) else ""
        raise RehearsalFailure(f"{name}: {type(err).__name__}: {message}{where}") from err
    finally:
        config.meta_nonzero_assume_all_nonzero = saved
