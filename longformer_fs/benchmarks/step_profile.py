"""What one training step ran, for the end-to-end benches (``bench lm``, ``led``,
``finetune``) and the report.

:func:`instrumented_step` runs one step under the profiler to say what it ran: the
attention backend of every band-attention call, the kernel of every scaled-dot-product
attention call (the peers'), the top kernels by time, host syncs, host-to-device copies,
and what dynamo compiled. :func:`saved_tensor_bytes` says what each layer saves for the
backward, :func:`measure_step` times a step and adds both, and :func:`attention_summary`
and :func:`profile_table` put the figures in words.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import Counter
from typing import Callable, Iterator

import torch
from torch.profiler import profile, record_function

from .. import devices
from ..attention.calls import backend_calls
from .measure import cpu_peak, event_name, median_time, quiet_native_stderr

# The aten op each scaled-dot-product-attention kernel is recorded as (forward; the
# backward has its own op), and the name a result gives it.
SDPA_KERNELS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_fused_attention_overrideable": "fused (overrideable)",
    "aten::_scaled_dot_product_attention_math": "math",
}
_STEP = "longformer_fs::measured_step"
# The profile's own Python-function and bookkeeping events: not ops of the step.
_NOT_OPS = re.compile(r"\(\d+\): |^<built-in|^nn\.Module: |^autograd::engine::|^\[memory\]$|^" + re.escape(_STEP))
# Where a sync or a copy came from: the nearest frame of these packages (but this module's),
# else the nearest frame outside torch.
_OUR_FRAMES = re.compile(
    r"^(?!longformer_fs/benchmarks/step_profile\.py)(longformer_fs|fairseq|fairseq_cli|transformers)/"
)
_ANY_FRAME = re.compile(r"^(?!torch/|<built-in|<frozen|typing\.py).*\(\d+\): ")
# CUDA runtime calls that make the host wait (a version suffix such as ``_v3020`` aside).
_SYNC_CALLS = re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy)(_v\d+)?$")


def add_saved_tensors_argument(parser) -> None:
    """``--saved-tensors``: the end-to-end benches' option of one more, measured, step."""
    parser.add_argument(
        "--saved-tensors", action="store_true",
        help="also measure the bytes each layer saves for the backward (one more step per model)",
    )  # fmt: skip


def attention_kernel(sdpa: dict[str, int], softmax_calls: int) -> str:
    """One name for the attention kernels a step ran: the SDPA kernels by calls (``"flash"``,
    ``"efficient + math"``), or ``"bmm + softmax (no SDPA)"`` when softmax ran without SDPA
    (fairseq's own path, HF's Longformer), or ``"none"``."""
    if sdpa:
        return " + ".join(name for name, _ in Counter(sdpa).most_common())
    return "bmm + softmax (no SDPA)" if softmax_calls else "none"


def _site(stack: list[str]) -> str:
    """Which Python function an op ran in, from the names of the events around it
    (outermost first): ``path.py(line of its def): name``."""
    for name in reversed(stack):
        if _OUR_FRAMES.match(name):
            return name
    return next((name for name in reversed(stack) if _ANY_FRAME.match(name)), "?")


def _top(counter: Counter, n: int = 8) -> list[dict]:
    return [{"site": site, "count": count} for site, count in counter.most_common(n)]


def dynamo_totals() -> dict[str, int]:
    """dynamo's running totals in this process: graphs compiled, graph breaks, guard failures
    (each one, a frame recompiled). All 0 when dynamo was never imported: nothing compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {"graphs": 0, "graph_breaks": 0, "guard_failures": 0}
    counters = utils.counters
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "guard_failures": sum(len(v) for v in getattr(utils, "guard_failures", {}).values()),
    }


@contextlib.contextmanager
def dynamo_compiles() -> Iterator[dict]:
    """What dynamo compiled inside: ``{"compiles", "recompiles", "graph_breaks",
    "recompile_reasons", "graph_break_reasons"}``, filled on exit.

    A compile is a frame dynamo traced (its callback's compile id ``frame/attempt``); a
    recompile, one whose frame was compiled before (attempt > 0). Graph breaks and their
    reasons are the differences of dynamo's counters. Nothing is counted when dynamo was
    not imported at entry: nothing could have been compiled before, and the step's code
    ran once before the measured step, so it would have imported it.
    """
    found: dict = {"compiles": 0, "recompiles": 0, "graph_breaks": 0, "recompile_reasons": [],
                   "graph_break_reasons": []}  # fmt: skip
    dynamo = sys.modules.get("torch._dynamo")
    utils = sys.modules.get("torch._dynamo.utils")
    if dynamo is None or utils is None:
        yield found
        return
    handler = getattr(dynamo, "callback_handler", None)
    trigger = getattr(getattr(sys.modules.get("torch._dynamo.callback"), "CallbackTrigger", None), "DYNAMO", None)
    ids: list[str] = []

    def started(args=None) -> None:  # older torch calls it without arguments
        if trigger is None or getattr(args, "callback_trigger", trigger) == trigger:
            ids.append(str(getattr(args, "compile_id", "")))

    breaks_before = Counter(utils.counters["graph_break"])
    failures = getattr(utils, "guard_failures", {})
    failures_before = {code: len(reasons) for code, reasons in failures.items()}
    if handler is not None:
        handler.register_start_callback(started)
    try:
        yield found
    finally:
        if handler is not None:
            handler.remove_start_callback(started)
        attempts = [int(m.group(1)) for m in (re.search(r"\d+/(\d+)", i) for i in ids) if m]
        breaks = Counter(utils.counters["graph_break"]) - breaks_before
        reasons = [r for code, rs in failures.items() for r in rs[failures_before.get(code, 0) :]]
        found.update(
            compiles=len(ids),
            recompiles=sum(1 for a in attempts if a > 0),
            graph_breaks=sum(breaks.values()),
            recompile_reasons=[str(r).splitlines()[0][:300] for r in reasons[:5]],
            graph_break_reasons=[{"reason": str(r)[:300], "count": n} for r, n in breaks.most_common(5)],
        )


def instrumented_step(
    step: Callable[[], object], device: torch.device | str = "cpu", top: int = 25, since: dict | None = None
) -> dict:
    """Run ``step()`` once under the profiler and say what it ran.

    Args:
        step: one training step (forward, loss, backward).
        device: where it runs; on CUDA the kernels are the GPU's, on CPU the ops'.
        top: how many kernels (ops on CPU) to keep, by time.
        since: :func:`dynamo_totals` taken before the measurement's first step, to say what
            dynamo compiled before this one (warm-up and timed steps).

    Returns:
        ``{"peak_bytes": ..., "attention": {"backends": {"backend (kind)": calls},
        "sdpa": {kernel: calls}, "softmax_calls": n, "kernel": name}, "profile": {...}}``;
        the profile holds ``kernels`` (``[{"name", "count", "ms"}]``, the ``top`` by total
        time: CUDA kernels on a GPU, ops by self CPU time on a CPU), ``host_syncs``,
        ``h2d_copies`` (each a count and where they came from) and ``dynamo``. Peak bytes
        are the tensor memory above what was live before, as :func:`.measure.peak_memory_bytes`.
    """
    device = torch.device(device)
    cuda = devices.runs_kernels(device)
    before = dynamo_totals()
    activities = devices.profiler_activities(device)
    # On CPU the peak comes from the profiler's allocation events, on CUDA from the allocator.
    # The Python frames (with_stack) say where syncs and copies come from. A rehearsal's watch
    # names those sites itself (longformer_fs.rehearsal), and its Python runs at every op: with
    # the frames recorded too, a toy step's profile would take minutes to read.
    prof = profile(activities=activities, profile_memory=not cuda, with_stack=not devices.rehearsing(device))
    devices.synchronize(device)
    devices.reset_peak_memory(device)
    base = devices.allocated_bytes(device)
    with quiet_native_stderr():
        prof.__enter__()
    try:
        with backend_calls() as calls, dynamo_compiles() as compiled:
            with record_function(_STEP):
                step()
            devices.synchronize(device)  # inside the profile, so that every kernel of the step is in it
    finally:
        with quiet_native_stderr():
            prof.__exit__(None, None, None)
    peak = devices.peak_allocated_bytes(device) - base if cuda else cpu_peak(prof)
    found = step_events(StepEvents(prof.profiler.kineto_results.events()), cuda, top)
    dynamo = {
        "in_step": compiled,
        "before_step": {k: before[k] - since.get(k, 0) for k in before} if since is not None else None,
        "totals": dynamo_totals(),
    }
    sdpa, softmax_calls = found.pop("sdpa"), found.pop("softmax_calls")
    return {
        "peak_bytes": int(peak),
        "attention": {
            "backends": dict(calls),
            "sdpa": sdpa,
            "softmax_calls": softmax_calls,
            "kernel": attention_kernel(sdpa, softmax_calls),
        },
        "profile": {"device": device.type, **found, "dynamo": dynamo},
    }


def step_events(seen: StepEvents, cuda: bool, top: int = 25) -> dict:
    """What a profiled step ran, from its events: ``sdpa`` (kernel: calls), ``softmax_calls``,
    the ``top`` ``kernels`` by time (GPU kernels on CUDA, ops by self CPU time on a CPU),
    ``host_syncs`` and ``h2d_copies``, each a count and the Python functions they came from."""
    sdpa = Counter(SDPA_KERNELS[name] for name in seen.host_names if name in SDPA_KERNELS)
    kernels = seen.device_time if cuda else seen.op_self_time
    ranked = sorted(kernels.items(), key=lambda item: -item[1][1])
    # On a CPU torch._assert_async reads its flag at once; on CUDA it checks on the device.
    asserts = [stack for stack in seen.scalar_reads if "aten::_assert_async" in stack]
    reads = [stack for stack in seen.scalar_reads if "aten::_assert_async" not in stack]
    syncs: dict = {
        "count": len(reads),
        "what": "reads of a tensor's value by the host (aten::_local_scalar_dense: .item(), bool(), int()); "
        + ("on CUDA each waits for the GPU" if cuda else "on CUDA each would wait for the GPU"),
        "sites": _top(Counter(_site(stack) for stack in reads)),
    }
    copies: dict = {"count": 0, "what": "copies from host memory to the device"}
    if cuda:
        syncs["runtime_calls"] = dict(Counter(name for name in seen.host_names if _SYNC_CALLS.match(name)))
        syncs["device_to_host_copies"] = sum(n for name, (n, _) in seen.device_time.items() if "DtoH" in name)
        copies["count"] = sum(n for name, (n, _) in seen.device_time.items() if "HtoD" in name)
        copies["sites"] = _top(Counter(_site(stack) for stack in seen.copy_launches))
    else:
        syncs["cpu_only_assert_reads"] = len(asserts)
        copies["what"] += ": none, the device is this CPU"
    return {
        "sdpa": dict(sdpa),
        "softmax_calls": seen.host_names.count("aten::_softmax"),
        "kernels": [{"name": name[:160], "count": n, "ms": round(ms, 4)} for name, (n, ms) in ranked[:top]],
        "kernels_total_ms": round(sum(ms for _, ms in kernels.values()), 4),
        "kernels_ranked_by": "GPU time" if cuda else "self CPU time (ops)",
        "host_syncs": syncs,
        "h2d_copies": copies,
    }


class StepEvents:
    """The measured step's events, read from kineto's own records.

    Not through ``profile.events()``: with ``with_stack=True`` a Python frame's name is at
    times not UTF-8, and that parse fails whole; here such a name reads as ``""``. It is
    also cheaper: no ``FunctionEvent`` per record.

    Host events count when they lie within the step's annotation, on any thread: on CUDA
    the backward runs on the autograd engine's own thread.

    Attributes:
        host_names: the names of the host-side events inside the step (ops, runtime calls).
        op_self_time: ``{op: [calls, ms]}`` of the step's ops, by self time (an op's
            duration less its children's on its thread).
        device_time: ``{kernel: [launches, ms]}`` of every device event (CUDA).
        scalar_reads: for each ``aten::_local_scalar_dense``, the names around it on its
            thread, outermost first.
        copy_launches: the same for each op that launched a host-to-device copy.
    """

    def __init__(self, records) -> None:
        cpu = torch._C._autograd.DeviceType.CPU
        host, device, copies = [], [], set()
        for record in records:
            name = event_name(record) or ""
            if record.device_type() != cpu:
                if name != _STEP:  # not the annotation's own span on the GPU's timeline
                    device.append((name, record.duration_ns(), record.linked_correlation_id()))
            elif not record.is_async() and record.start_thread_id() == record.end_thread_id() and name != "[memory]":
                python = getattr(record, "is_python_function", lambda: False)()
                # A frontend op (no link) carries the correlation id its kernels link to.
                own = record.correlation_id() if record.linked_correlation_id() == 0 else None
                host.append((record.start_ns(), record.end_ns(), record.start_thread_id(), name, own, python))
        self.device_time: dict[str, list] = {}
        for name, duration, linked in device:
            entry = self.device_time.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += duration / 1e6
            if "HtoD" in name:
                copies.add(linked)
        window = next(((s, e) for s, e, _, name, _, _ in host if name == _STEP), None)
        if window is not None:  # within the step's annotation: not the profiler's set-up
            host = [h for h in host if window[0] <= h[0] and h[1] <= window[1]]
        host.sort(key=lambda h: (h[2], h[0], -h[1]))  # by thread, then outer events first
        self.host_names = [h[3] for h in host if not h[5]]
        self.op_self_time: dict[str, list] = {}
        self.scalar_reads: list[list[str]] = []
        self.copy_launches: list[list[str]] = []
        stack: list[list] = []  # [end, name, self time, is op, thread]

        def close(entry: list) -> None:
            if entry[3]:
                totals = self.op_self_time.setdefault(entry[1], [0, 0.0])
                totals[0] += 1
                totals[1] += entry[2] / 1e6

        for start, end, thread, name, own, python in host:
            while stack and (stack[-1][4] != thread or stack[-1][0] <= start):
                close(stack.pop())
            if stack:
                stack[-1][2] -= end - start
            if name == "aten::_local_scalar_dense":
                self.scalar_reads.append([entry[1] for entry in stack])
            if own is not None and own in copies:
                self.copy_launches.append([entry[1] for entry in stack] + [name])
            stack.append([end, name, end - start, not python and not _NOT_OPS.search(name), thread])
        while stack:
            close(stack.pop())


def model_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """A model's layers, named as its modules are: the members of every ``ModuleList`` called
    ``layers``, ``blocks`` or ``layer`` (fairseq, our decoder, HF), outermost lists only."""
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "blocks", "layer"):
            if not any(name.startswith(outer + ".") for outer, _ in found):
                found += [(f"{name}.{i}", layer) for i, layer in enumerate(module)]
    return found


def saved_tensor_bytes(step: Callable[[], object], model: torch.nn.Module) -> dict:
    """Bytes that each layer of ``model`` saves for the backward during one ``step()``.

    Every tensor autograd saves in the forward is attributed to the innermost layer
    (:func:`model_layers`) running when it is saved, else to ``other`` (embeddings, the
    output projection, the loss). Each storage counts once, whole (a view saves its base),
    and parameters do not count: they are held anyway. Recomputation in the backward
    (activation checkpointing) saves nothing here: what a checkpointed layer keeps is its
    input, saved by its checkpoint.

    Returns:
        ``{"layers": [{"layer": name, "bytes": n}], "other_bytes": n, "total_bytes": n}``.
    """
    layers = model_layers(model)
    running: list[str] = []
    totals: Counter = Counter()
    seen: set[tuple] = set()
    params = {(p.device, p.untyped_storage().data_ptr()) for p in model.parameters()}
    task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)

    def pack(tensor: torch.Tensor):
        if task_id() != -1:  # saved while the backward recomputes: freed before it ends
            return tensor
        try:
            storage = tensor.untyped_storage()
            key = (tensor.device, storage.data_ptr())
            size = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return tensor
        if key not in seen and key not in params:
            seen.add(key)
            totals[running[-1] if running else "other"] += size
        return tensor

    def entered(name: str):
        return lambda module, args: running.append(name)

    def left(module, args, output) -> None:
        running.pop()

    handles = []
    for name, layer in layers:
        handles += [layer.register_forward_pre_hook(entered(name)), layer.register_forward_hook(left)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            step()
    finally:
        for handle in handles:
            handle.remove()
    rows = [{"layer": name, "bytes": int(totals.get(name, 0))} for name, _ in layers]
    return {"layers": rows, "other_bytes": int(totals.get("other", 0)), "total_bytes": int(sum(totals.values()))}


def measure_step(
    step: Callable[[], object], model: torch.nn.Module, device: torch.device | str, repeat: int, warmup: int,
    saved_tensors: bool = False,
) -> dict:  # fmt: skip
    """A training step's figures: the median seconds of ``repeat`` steps after ``warmup``,
    then one :func:`instrumented_step` (peak memory, attention, profile) and, with
    ``saved_tensors``, one more for :func:`saved_tensor_bytes`.

    Returns:
        ``{"step_s", "peak_gib", "attention", "profile"}`` and ``"saved_tensors"`` when asked
        (``{"error": ...}`` there if that step failed: its hooks are the only thing it adds).
    """
    since = dynamo_totals()
    seconds = median_time(step, device, repeat=repeat, warmup=warmup)
    record = instrumented_step(step, device, since=since)
    figures = {
        "step_s": seconds,
        "peak_gib": record["peak_bytes"] / 2**30,
        "attention": record["attention"],
        "profile": record["profile"],
    }
    if saved_tensors:
        try:
            figures["saved_tensors"] = saved_tensor_bytes(step, model)
        except RuntimeError as err:
            figures["saved_tensors"] = {"error": str(err).splitlines()[0][:200]}
    return figures


def attention_summary(result: dict) -> str:
    """``band: flash (plain + dropout) x 12; SDPA: efficient`` for a result, or its error."""
    if "error" in result:
        return f"error: {result['error'][:60]}"
    attention = result["attention"]
    band = ", ".join(f"{name} x {calls}" for name, calls in attention["backends"].items()) or "none"
    return f"band attention: {band}; SDPA kernel: {attention['kernel']}"


def profile_table(name: str, record: dict) -> str:
    """A model's profile as text for people: kernels, syncs, copies, compiles, memory."""
    profile_ = record.get("profile") or {}
    lines = [f"== {name}"]
    attention = record.get("attention") or {}
    if attention:
        backends = ", ".join(f"{k}: {v}" for k, v in attention.get("backends", {}).items()) or "none"
        lines.append(f"band attention calls: {backends}; SDPA kernel: {attention.get('kernel')}")
    if "peak_gib" in record:
        lines.append(f"peak memory: {record['peak_gib']:.3f} GiB")
    saved = record.get("saved_tensors")
    if saved:
        per_layer = ", ".join(f"{row['layer']} {row['bytes'] / 2**20:.1f}" for row in saved["layers"])
        lines.append(f"saved for backward, MiB: {per_layer}; other {saved['other_bytes'] / 2**20:.1f}")
    syncs, copies = profile_.get("host_syncs", {}), profile_.get("h2d_copies", {})
    lines.append(
        f"host syncs: {syncs.get('count', 0)}"
        + "".join(f"; {s['count']} x {s['site']}" for s in syncs.get("sites", []))
        + (f"; runtime {syncs['runtime_calls']}" if syncs.get("runtime_calls") else "")
    )
    lines.append(f"host-to-device copies: {copies.get('count', 0)}")
    dynamo = (profile_.get("dynamo") or {}).get("in_step") or {}
    lines.append(
        f"in the step: {dynamo.get('compiles', 0)} compiles, {dynamo.get('recompiles', 0)} recompiles, "
        f"{dynamo.get('graph_breaks', 0)} graph breaks"
    )
    kernels = profile_.get("kernels") or []
    if kernels:
        lines.append(
            f"top {len(kernels)} by {profile_.get('kernels_ranked_by')} (of {profile_['kernels_total_ms']:.2f} ms):"
        )
        lines.append(f"{'ms':>10} {'count':>6}  name")
        lines += [f"{k['ms']:>10.3f} {k['count']:>6}  {k['name']}" for k in kernels]
    return "\n".join(lines) + "\n"
