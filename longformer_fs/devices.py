"""Every decision that differs on a GPU, in one module; and the rehearsal that takes them on a CPU.

A branch that runs only on CUDA is a branch CI never runs: two crashes reached the GPU path
that way. So no other module asks ``tensor.is_cuda`` or ``device.type == "cuda"``. They ask
the predicates here, and one reading of this module shows everything that differs on a GPU:

- :func:`on_gpu`: the device takes the CUDA decisions. That covers ``auto``'s order and key,
  each backend's limits, aten's FlashAttention in place of its CPU stand-in, FlexAttention
  compiled, and the kernels launched on the device's stream;
- :func:`kind`: the device type those decisions are keyed by (``auto``'s order, ``check``'s
  records and shapes);
- :func:`gpu_capability`, :func:`gpu_name`, :func:`gpu_memory_bytes`: what the GPU is;
- :func:`cuda_runtime`, :func:`bf16_supported`: whether this process has a GPU to train on,
  which decides fairseq's mixed precision and the commands' default device;
- :func:`fused_float32_products`: whether a half-precision matmul can accumulate into a
  float32 output by itself (``aten::bmm.dtype``, which CUDA has and the CPU lacks);
- :func:`compiler`: what ``torch.compile`` lowers our compiled regions with;
- :func:`runs_kernels`, :func:`profiler_activities`, :func:`autocast`, :func:`synchronize`,
  :func:`reset_peak_memory`, :func:`allocated_bytes`, :func:`peak_allocated_bytes`,
  :func:`free_memory_bytes`, :func:`release_cached_memory`: what the benchmarks profile, wait on
  and read;
- :func:`stream_handle`, :func:`current`: where the compiled kernels launch.

**The rehearsal.** Inside :func:`rehearsal`, tensors on the ``meta`` device take every CUDA
decision, as on an sm90 GPU that ``longformer-fs check`` has never measured. A CPU then runs
the GPU path's own code, forward and backward. Meta tensors carry shapes, dtypes and devices
but no values, and every aten op has a meta kernel, FlashAttention's included. So what a
first GPU step would fail on fails here too:

- an op without a derivative (autograd is the same);
- a tensor made on the host that meets a device tensor (meta and CPU do not mix);
- a read-back: ``.item()``, ``bool(t)`` and ``tolist()`` raise, because meta has no values;
- a call that the CUDA op itself would refuse. The meta kernels skip those checks, so
  the callers check the CUDA op's contract where :func:`rehearsing` says so
  (FlashAttention's dtype, head size, ``cum_seq`` and debug mask: ``attention.backends.flash``).

Two things change in a rehearsal besides the predicates:

- :func:`compiler` is ``aot_eager``. That is dynamo and AOTAutograd, exactly as inductor
  receives them, without inductor's code generation, which cannot run on meta;
- FlexAttention's check that refuses meta tensors is lifted, so its own code runs:
  the ``BlockMask``, the higher-order op, the dense path that stands in for its kernel
  (and that path's backward gives the gradients of captured tensors their shapes, as the
  kernel does: :func:`_flex_attention_on_meta`).

Meta was chosen by trying the alternatives. ``FakeTensorMode`` reports ``is_cuda`` on a CPU
build of torch, but modules cannot be built on its device and autograd fails. A CUDA build of
torch (5.4 GB) builds modules on a fake device, but ``backward()`` fails without one. On meta,
forward and backward run with torch's own kernels' shape functions; only the question "is
this a GPU?" has to be answered by us, and it is answered here.

The rehearsal does not run the kernels themselves (CUDA, Triton, inductor's code), nor does
it measure numbers, speed or memory: those need a GPU (``longformer-fs report``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch


@dataclass(frozen=True)
class RehearsedGpu:
    """The GPU a rehearsal stands for.

    Attributes:
        name: what :func:`gpu_name` says; never a real GPU's, so that no record ``check``
            keeps for a real one is read in a rehearsal.
        capability: the compute capability, ``(9, 0)`` for an H100 or H200.
        memory_bytes: what :func:`gpu_memory_bytes` says.
    """

    name: str = "rehearsed sm90 GPU (meta tensors)"
    capability: tuple[int, int] = (9, 0)
    memory_bytes: int = 80 * 2**30


_REHEARSAL: RehearsedGpu | None = None


def _device(device) -> torch.device:
    if isinstance(device, torch.Tensor):
        return device.device
    return torch.device(device if device is not None else "cpu")


def rehearsing(device=None) -> bool:
    """Whether a rehearsal is on; with ``device`` (a device, a name or a tensor), whether that
    device is the one rehearsing the GPU (``meta`` inside :func:`rehearsal`)."""
    if _REHEARSAL is None:
        return False
    return device is None or _device(device).type == "meta"


def on_gpu(device) -> bool:
    """Whether ``device`` (a device, a name or a tensor) takes the CUDA decisions: a CUDA
    device, or ``meta`` in a rehearsal."""
    return _device(device).type == "cuda" or rehearsing(device)


def kind(device) -> str:
    """``"cuda"`` for a device that takes the CUDA decisions, else its own type (``"cpu"``,
    ``"meta"``...): what ``auto``'s order, its choices and ``check``'s shapes are keyed by."""
    device = _device(device)
    return "cuda" if on_gpu(device) else device.type


def cuda_runtime() -> bool:
    """Whether this process has a GPU to run on: torch sees a CUDA device, or a rehearsal is on.
    It decides whether fairseq's mixed precision can train and what the default device is."""
    return _REHEARSAL is not None or torch.cuda.is_available()


def default_device() -> str:
    """``cuda`` when this process has a GPU (:func:`cuda_runtime`), else ``cpu``; ``meta`` in a
    rehearsal, whose tensors stand for the GPU's."""
    if _REHEARSAL is not None:
        return "meta"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _gpu_property(device, rehearsed: str, read):
    """A property of the GPU behind ``device`` (by default the process's own): the rehearsed
    GPU's attribute ``rehearsed`` in a rehearsal, ``read(device)`` on a visible CUDA device,
    else None."""
    device = _device(device if device is not None else default_device())
    if rehearsing(device):
        return getattr(_REHEARSAL, rehearsed)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return read(device)


def gpu_capability(device=None) -> tuple[int, int] | None:
    """The compute capability of the GPU behind ``device`` (None: not a GPU, or none visible)."""
    return _gpu_property(device, "capability", torch.cuda.get_device_capability)


def gpu_name(device=None) -> str | None:
    """The name of the GPU behind ``device`` (its current one for a bare ``cuda``), or None."""
    return _gpu_property(device, "name", lambda gpu: torch.cuda.get_device_name(gpu.index))


def gpu_memory_bytes(device=None) -> int | None:
    """The GPU's total memory in bytes, or None off a GPU."""
    return _gpu_property(device, "memory_bytes", lambda gpu: torch.cuda.get_device_properties(gpu).total_memory)


def gpu_names() -> list[str]:
    """Every GPU this process sees, by name (the rehearsed one in a rehearsal)."""
    if _REHEARSAL is not None:
        return [_REHEARSAL.name]
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def bf16_supported() -> bool:
    """Whether this process's GPU computes in bfloat16 (False without one)."""
    if _REHEARSAL is not None:
        return _REHEARSAL.capability >= (8, 0)
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def fused_float32_products(device) -> bool:
    """Whether a half-precision batched matmul on ``device`` accumulates into a float32 output
    itself (``torch.bmm(..., out_dtype=torch.float32)``): CUDA has the op, the CPU does not,
    and it has no derivative of its own (``attention.dense.float32_scores`` gives it one)."""
    return on_gpu(device) and hasattr(torch.ops.aten.bmm, "dtype")


def compiler(device=None) -> str:
    """What ``torch.compile`` lowers our compiled regions with: inductor; ``aot_eager`` in a
    rehearsal (dynamo and AOTAutograd as inductor receives them; inductor generates no code
    for meta tensors)."""
    return "aot_eager" if _REHEARSAL is not None and (device is None or rehearsing(device)) else "inductor"


# ------------------------------------------------------------------ what the benches read


def synchronize(device) -> None:
    """Wait for ``device``'s queued work (a no-op where nothing is queued: CPU, meta)."""
    device = _device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device) -> None:
    """Start counting ``device``'s peak allocation afresh (CUDA's allocator statistics)."""
    device = _device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def allocated_bytes(device) -> int:
    """Bytes ``device``'s allocator holds for tensors now (0 where it keeps no statistics)."""
    device = _device(device)
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def peak_allocated_bytes(device) -> int:
    """The most bytes ``device``'s allocator held since :func:`reset_peak_memory` (0 where it
    keeps no statistics)."""
    device = _device(device)
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def runs_kernels(device) -> bool:
    """Whether ``device`` runs GPU kernels: a CUDA device, whose kernels the profiler records and
    whose allocator keeps statistics. The rehearsal's ``meta`` takes the GPU's decisions but runs
    none (its profile is the host's, its memory nothing)."""
    return _device(device).type == "cuda"


def profiler_activities(device) -> list:
    """What ``torch.profiler`` records for a step on ``device``: the host, and a GPU's kernels."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runs_kernels(device) else [])


def autocast(device, dtype: torch.dtype | None):
    """The context a step autocasts to ``dtype`` in on ``device`` (None: none). Autocast has no
    ``meta`` dispatch: in a rehearsal the step runs in the dtypes it was given."""
    device = _device(device)
    if dtype is None or device.type == "meta":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def free_memory_bytes(device) -> int | None:
    """Bytes free on ``device`` now: the rehearsed GPU's whole memory in a rehearsal, None where
    the question has no answer (CPU, meta outside a rehearsal)."""
    device = _device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if rehearsing(device):
        return _REHEARSAL.memory_bytes
    return None


def release_cached_memory(device) -> None:
    """Hand ``device``'s cached blocks back (between two measurements)."""
    if _device(device).type == "cuda":
        torch.cuda.empty_cache()


def initialised() -> bool:
    """Whether this process has started a CUDA context (which a fork does not survive)."""
    return torch.cuda.is_initialized()


# ------------------------------------------------------------------ the compiled kernels


def stream_handle(device) -> int:
    """The handle of ``device``'s current CUDA stream, where the compiled kernels launch (0 on CPU)."""
    device = _device(device)
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def current(device):
    """A context making ``device`` the current CUDA device for a launch (nothing to do on CPU)."""
    device = _device(device)
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


# ------------------------------------------------------------------ the rehearsal


@contextlib.contextmanager
def rehearsal(gpu: RehearsedGpu | None = None) -> Iterator[RehearsedGpu]:
    """Inside, ``meta`` tensors take every CUDA decision, as on ``gpu`` (an sm90 GPU by default).

    It is process-wide (the decisions are module state, as a GPU is the process's), and
    nests: the innermost GPU is the one rehearsed until it ends.
    """
    global _REHEARSAL
    saved = _REHEARSAL
    _REHEARSAL = gpu or RehearsedGpu()
    try:
        with _flex_attention_on_meta():
            yield _REHEARSAL
    finally:
        _REHEARSAL = saved


@contextlib.contextmanager
def _flex_attention_on_meta() -> Iterator[None]:
    """FlexAttention's own code, run on meta tensors. Two of its checks are lifted for them:

    - it refuses devices it has no kernels for; the mask, the higher-order op and its
      dense path (which stands in for the kernel) run on meta;
    - its dense backward gives no gradient to a tensor the score function captures when that
      tensor does not require one, and a compiled backward saves its tensors without
      ``requires_grad``. The kernel's lowering, and the op's shape function, give every
      captured tensor its gradient. On meta the missing gradients get their shapes.
    """
    from torch._C import DispatchKey
    from torch._higher_order_ops.flex_attention import flex_attention_backward
    from torch.nn.attention import flex_attention as flex_module

    saved_check = flex_module._validate_device
    key = DispatchKey.CompositeExplicitAutograd
    saved_backward = flex_attention_backward.py_kernels[key]

    def validate(query, key, value):
        if query.device.type != "meta":
            saved_check(query, key, value)

    def backward(*args, **kwargs):
        grads = saved_backward(*args, **kwargs)
        query, buffers = args[0], args[12]
        if query.device.type != "meta":
            return grads
        captured = tuple(
            torch.empty_like(buffer, memory_format=torch.contiguous_format)
            if grad is None and isinstance(buffer, torch.Tensor)
            else grad
            for grad, buffer in zip(grads[3], buffers, strict=True)
        )
        return (*grads[:3], captured)

    flex_module._validate_device = validate
    flex_attention_backward.py_kernels[key] = backward
    flex_attention_backward._dispatch_cache.clear()
    try:
        yield
    finally:
        flex_module._validate_device = saved_check
        flex_attention_backward.py_kernels[key] = saved_backward
        flex_attention_backward._dispatch_cache.clear()


def rehearsed_gpu() -> RehearsedGpu | None:
    """The GPU being rehearsed, or None outside a rehearsal."""
    return _REHEARSAL
