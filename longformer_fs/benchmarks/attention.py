"""``longformer-fs bench attention``: every attention implementation, side by side.

Two parts, both in one process so every ratio compares runs on the same machine state:

- ``scaling``: time and peak memory against sequence length (the paper's Figure 1),
  bidirectional, dilation 1, all implementations;
- ``variants``: the target shape (``--target-len``) in causal and dilated variants, with
  1 and 2 threads.

The printed tables hold the measurements and the ratio of every implementation to the
kernel; the project's speed targets and how they were met are in ``docs/benchmarks.md``.
Dense implementations are skipped, with the reason, where T x T would not fit in memory or
beyond ``--dense-max-len``. FlexAttention has no CPU backward, so on CPU it is timed
forward only.

The ``work`` column is the query-key pairs an implementation computes over the band's
pairs, read from the tiles it visits (``Backend.work``, the peer's own block mask). It
needs no GPU, and it is what a GPU's time follows: 1.0 is the band alone.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from tqdm import tqdm

from .. import devices
from ..attention import available_backends, banded_attention
from ..attention.backends import BACKENDS, flex
from ..attention.band import band_mask
from ..attention.spec import BandSpec
from . import int_list
from .measure import median_time, peak_memory_bytes

PEERS = {
    "sdpa": "dense full attention (torch SDPA, no band)",
    "sdpa-band": "torch SDPA with a dense (T, T) band mask",
    "flexattention": "torch's compiled FlexAttention with a band mask_mod and a BlockMask built once (no code of ours)",
}
# Not run unless named: it answers one question about `flex` on a GPU.
DIAGNOSTICS = {
    "flex-static": "the flex backend with static lengths (length_mode 'buckets': each length bucket compiled "
    "for its constant length) against flex's default (one compilation for every length, padded to a multiple of "
    "128); on CPU, the backend's computation compiled for the shape, forward only",
}
DENSE = {"reference", "sdpa", "sdpa-band"}
FLEX = {"flex", "flex-static", "flexattention"}  # compiled FlexAttention: forward only on CPU


@dataclass(frozen=True)
class Case:
    seq_len: int
    window: int
    dilation: int
    causal: bool
    threads: int

    @property
    def variant(self) -> str:
        parts = ["causal" if self.causal else "bidir", f"d={self.dilation}"]
        return " ".join(parts)


@dataclass
class Result:
    impl: str
    part: str
    seq_len: int
    variant: str
    threads: int
    fwd_ms: float | None = None
    fwd_bwd_ms: float | None = None
    peak_mib: float | None = None
    fwd_gflops: float | None = None
    work: float | None = None  # query-key pairs computed over the band's pairs (work_ratio)
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    impls = available_backends() + list(PEERS)
    parser.add_argument(
        "--impls",
        default=",".join(impls),
        help=f"comma-separated implementations: attention backends "
        f"({', '.join(available_backends())}), peers ({', '.join(PEERS)}) and, only when named, "
        f"{', '.join(DIAGNOSTICS)}",
    )
    parser.add_argument("--parts", default="scaling,variants", help="which parts to run: scaling, variants")
    parser.add_argument(
        "--seq-lens",
        type=int_list,
        default=[1024, 2048, 4096, 8192, 16384, 32768, 65536],
        help="sequence lengths of the scaling part",
    )
    parser.add_argument("--target-len", type=int, default=4096, help="sequence length of the variants part")
    parser.add_argument("--window", type=int, default=256, help="one-sided window w")
    parser.add_argument("--dilation", type=int, default=1, help="dilation of the scaling part")
    parser.add_argument("--causal", action="store_true", help="causal band in the scaling part")
    parser.add_argument("--variant-dilations", type=int_list, default=[2, 3], help="dilations of the variants part")
    parser.add_argument("--heads", type=int, default=8, help="heads H")
    parser.add_argument("--head-dim", type=int, default=64, help="head dimension D")
    parser.add_argument("--batch", type=int, default=1, help="batch size B")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--device", default=devices.default_device())
    parser.add_argument(
        "--threads",
        type=int_list,
        default=sorted({1, torch.get_num_threads()}),
        help="CPU thread counts of the variants part; the scaling part uses the largest",
    )
    parser.add_argument(
        "--dense-max-len", type=int, default=16384, help="skip dense implementations (O(T^2) time) beyond this length"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (median reported)")
    parser.add_argument(
        "--out", type=Path, default=Path("bench_out/attention"), help="directory for results.json and plot.png"
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    parser.add_argument(
        "--baseline",
        default=None,
        help="implementation the ratios divide by (default: flexattention on CUDA, kernel on CPU)",
    )


# ------------------------------------------------------------------------ implementations


def band_pairs(seq_len: int, window: int, dilation: int, causal: bool) -> int:
    """Exact number of (query, key) pairs in the band (padding-free)."""
    total = 0
    for r in range(min(dilation, seq_len)):
        n = len(range(r, seq_len, dilation))
        m = torch.arange(n)
        hi = torch.clamp(m + (0 if causal else window), max=n - 1)
        lo = torch.clamp(m - window, min=0)
        total += int((hi - lo + 1).sum())
    return total


def _allow_recompiles() -> None:
    """Let one function compile once per case of this process.

    The peer and ``flex-static`` compile anew for each case (length, dilation, with and
    without gradients), and dynamo counts them against one function's recompile limit
    (8). Past it, dynamo would run FlexAttention eagerly, which is dense: a silently wrong
    measurement (80 GB at 16K tokens on a GPU). So the limit is raised for this process,
    and hitting it still raises.
    """
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.fail_on_recompile_limit_hit = True


@lru_cache(maxsize=None)
def _compiled_flex_attention(compiler: str):
    """torch's ``flex_attention``, compiled for each shape, as a user would (by ``compiler``:
    :func:`~longformer_fs.devices.compiler`)."""
    _allow_recompiles()
    return torch.compile(flex_attention, backend=compiler, dynamic=False)


def _spec(case: Case, heads: int, head_dim: int) -> BandSpec:
    return BandSpec(case.window, (case.dilation,) * heads, case.causal, head_dim**-0.5)


def static_flex(case: Case, q, k, v, compiler: str = "inductor") -> Callable[[], torch.Tensor]:
    """The flex backend's own computation (slot orders, tiles, masks) compiled for this one
    shape, ``dynamic=False``; q, k, v ``(B, H, T, D)``.

    On CPU this is how ``flex`` and ``flex-static`` are timed: there the backend runs
    FlexAttention's dense eager path, and compiled CPU FlexAttention is inference-only
    (forward only, no log-sum-exp). On a GPU the backend itself is timed
    (:func:`_bucketed_flex` for ``flex-static``).
    """
    spec = _spec(case, q.shape[1], q.shape[-1])
    inputs = flex.call_inputs(q, None, spec)
    _allow_recompiles()

    def attend(q, k, v):  # a code object of its own: its compilations are not the backend's
        return flex.band_forward(q, k, v, *inputs, spec.scale)

    forward = torch.compile(attend, backend=compiler, dynamic=False, fullgraph=True)
    return lambda: forward(q, k, v)


def _bucketed_flex(case: Case, q, k, v) -> Callable[[], torch.Tensor]:
    """``flex-static`` on a GPU: the flex backend, forward and backward as a model calls it,
    with its ``"buckets"`` length mode: FlexAttention compiled for each length bucket's
    constant length, against ``flex``'s one compilation for every length; q, k, v
    ``(B, T, H, D)``. At the report's lengths (4K, 16K, 64K: each a bucket) neither pads,
    so the two differ only in static against symbolic shapes."""

    def call():
        with flex.length_mode("buckets"):
            return banded_attention(q, k, v, case.window, case.dilation, case.causal, backend="flex")

    return call


@lru_cache(maxsize=8)
def _peer_block_mask(seq_len: int, window: int, dilation: int, causal: bool, device: str) -> BlockMask:
    upper = 0 if causal else window

    def band(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx
        return (offset % dilation == 0) & (offset >= -window * dilation) & (offset <= upper * dilation)

    return create_block_mask(band, None, None, seq_len, seq_len, device=device)


def _flexattention_peer(case: Case, q, k, v) -> Callable[[], torch.Tensor]:
    """What a user writes with FlexAttention alone: the upper bound the flex backend is held to."""
    block_mask = _peer_block_mask(case.seq_len, case.window, case.dilation, case.causal, str(q.device))
    attend = _compiled_flex_attention(devices.compiler(q.device))
    return lambda: attend(q, k, v, block_mask=block_mask, scale=q.shape[-1] ** -0.5)


def work_ratio(impl: str, case: Case, heads: int, head_dim: int, device: str) -> float:
    """Query-key pairs ``impl`` computes over the band's pairs, from the tiles it visits."""
    if impl in BACKENDS or impl == "flex-static":
        pairs = BACKENDS[impl.removesuffix("-static")].work(case.seq_len, _spec(case, heads, head_dim))
    elif impl == "flexattention":
        mask = _peer_block_mask(case.seq_len, case.window, case.dilation, case.causal, device)
        tiles = int(mask.kv_num_blocks.sum()) + int(mask.full_kv_num_blocks.sum())
        pairs = heads * tiles * mask.BLOCK_SIZE[0] * mask.BLOCK_SIZE[1]
    elif impl == "sdpa" and case.causal:
        pairs = heads * case.seq_len * (case.seq_len + 1) // 2
    else:  # dense
        pairs = heads * case.seq_len**2
    return pairs / (heads * band_pairs(case.seq_len, case.window, case.dilation, case.causal))


def make_call(impl: str, case: Case, q, k, v) -> Callable[[], torch.Tensor]:
    """A zero-argument forward for ``impl``; q, k, v are (B, T, H, D)."""
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    if impl in ("flex", "flex-static") and q.device.type == "cpu":
        return static_flex(case, qh, kh, vh)
    if impl == "flex-static":
        return _bucketed_flex(case, q, k, v)
    if impl == "flexattention":
        return _flexattention_peer(case, qh, kh, vh)
    if impl in available_backends():
        return lambda: banded_attention(q, k, v, case.window, case.dilation, case.causal, backend=impl)
    if impl == "sdpa":
        return lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=case.causal)
    if impl == "sdpa-band":
        mask = band_mask(case.seq_len, case.window, case.dilation, case.causal, q.device)
        return lambda: F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    raise ValueError(f"--impls: unknown implementation {impl!r}")


# ------------------------------------------------------------------------------ measuring


def _available_memory(device: torch.device) -> int:
    free = devices.free_memory_bytes(device)
    return free if free is not None else os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _skip_reason(impl: str, case: Case, args) -> str | None:
    if impl in BACKENDS:  # e.g. flash in float32: a row saying why, not an error
        dtype, device = getattr(torch, args.dtype), torch.device(args.device)
        limits = BACKENDS[impl].limits(_spec(case, args.heads, args.head_dim), device, args.head_dim, dtype)
        return "; ".join(limits) or None
    if impl not in DENSE:
        return None
    if case.seq_len > args.dense_max_len:
        return f"T > --dense-max-len={args.dense_max_len}"
    # fwd+bwd of a dense masked attention keeps about six (B, H, T, T) fp32 buffers.
    need = 6 * args.batch * args.heads * case.seq_len**2 * 4
    if impl == "sdpa":
        need = 0  # SDPA without a mask runs a flash or memory-efficient kernel: O(T) memory
    if need > 0.8 * _available_memory(torch.device(args.device)):
        return f"needs ~{need / 2**30:.0f} GiB"
    return None


def _inputs(impl: str, case: Case, args):
    """Seeded ``q, k, v`` ``(B, T, H, D)`` for ``case`` and whether ``impl`` runs forward only
    here (compiled CPU FlexAttention rejects inputs that need gradients)."""
    device = torch.device(args.device)
    forward_only = impl in FLEX and device.type == "cpu"
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch, case.seq_len, args.heads, args.head_dim)
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(shape, generator=gen).to(device, dtype).requires_grad_(not forward_only) for _ in range(3))
    return q, k, v, forward_only


def measure(impl: str, part: str, case: Case, args) -> Result:
    device = torch.device(args.device)
    result = Result(impl, part, case.seq_len, case.variant, case.threads)
    result.skipped = _skip_reason(impl, case, args)
    if result.skipped:
        return result
    torch.set_num_threads(case.threads)
    q, k, v, forward_only = _inputs(impl, case, args)
    result.work = work_ratio(impl, case, args.heads, args.head_dim, str(device))
    try:
        _time(make_call(impl, case, q, k, v), result, case, args, forward_only)
    except (torch.OutOfMemoryError, torch._dynamo.exc.FailOnRecompileLimitHit) as err:
        # One implementation that cannot run a case leaves the others' rows standing.
        result.skipped = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return result


def _time(call, result: Result, case: Case, args, forward_only: bool) -> None:
    device = torch.device(args.device)
    budget = 30.0  # seconds per timing: slow configurations get fewer repeats
    with torch.no_grad():
        result.fwd_ms = 1e3 * median_time(call, device, args.repeat, budget_s=budget)
    flops = (
        4 * args.batch * args.heads * args.head_dim * band_pairs(case.seq_len, case.window, case.dilation, case.causal)
    )
    result.fwd_gflops = flops / (result.fwd_ms * 1e-3) / 1e9
    if forward_only:
        result.notes.append("forward only: compiled CPU FlexAttention has no backward")
        with torch.no_grad():
            result.peak_mib = peak_memory_bytes(call, device) / 2**20
        return

    def fwd_bwd():
        call().float().sum().backward()

    result.fwd_bwd_ms = 1e3 * median_time(fwd_bwd, device, args.repeat, budget_s=budget)
    result.peak_mib = peak_memory_bytes(fwd_bwd, device) / 2**20


def time_split(impl: str, case: Case, args, top: int = 8, steps: int = 5) -> list[dict]:
    """Where one forward + backward of ``impl`` spends its time: the whole step's median
    first, then the ``top`` kernels (CUDA) or operators (CPU) by their own time, in ms per
    step, from torch's profiler: each row is the median over ``steps`` steps profiled one at
    a time, so a step that the machine paused (another process on the cores) moves no row,
    as it moves no median.

    On a GPU this says whether an implementation's time is the attention kernel itself or
    the work around it (gathers, block masks, casts), which a total cannot.
    """
    from statistics import median

    from torch.profiler import profile

    device = torch.device(args.device)
    q, k, v, forward_only = _inputs(impl, case, args)
    call = make_call(impl, case, q, k, v)

    def step():
        out = call()
        if not forward_only:
            out.float().sum().backward()

    whole = {"name": "(whole step)", "ms": 1e3 * median_time(step, device, repeat=5), "calls": 1}  # warm-up compiles
    cuda = devices.runs_kernels(device)
    activities = devices.profiler_activities(device)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    per_step: list[dict[str, tuple[float, int]]] = []  # operator -> (ms, calls), one dict a step
    for _ in range(steps):
        with profile(activities=activities) as prof:
            step()
            devices.synchronize(device)
        per_step.append({e.key: (getattr(e, key) / 1e3, e.count) for e in prof.key_averages() if getattr(e, key) > 0})
    rows = []
    for name in {name for seen in per_step for name in seen}:
        ms, calls = (median(seen.get(name, (0.0, 0))[i] for seen in per_step) for i in (0, 1))
        if ms > 0:  # seen in most steps: what one step alone ran (a pause) is no typical step
            rows.append({"name": name[:90], "ms": ms, "calls": int(calls)})
    rows.sort(key=lambda row: row["ms"], reverse=True)
    return [whole, *rows[:top]]


def matmul_gflops(device: str, dtype: torch.dtype, threads: int) -> float:
    """This machine's dense matmul rate, as the practical peak to compare against."""
    torch.set_num_threads(threads)
    a = torch.randn(2048, 2048, device=device, dtype=dtype)
    seconds = median_time(lambda: a @ a, device, repeat=5)
    return 2 * 2048**3 / seconds / 1e9


# --------------------------------------------------------------------------------- output


def print_results(results: list[Result], part: str, baseline: str) -> None:
    rows = [r for r in results if r.part == part]
    if not rows:
        return
    print(f"\n[{part}]")
    print(
        f"{'impl':<13} {'variant':<11} {'T':>6} {'thr':>3} {'fwd ms':>9} {'fwd+bwd ms':>11} {'peak MiB':>9}"
        f" {'fwd GF/s':>9} {'work':>5} {'x ' + baseline:>16}"
    )
    for r in rows:
        if r.skipped:
            print(f"{r.impl:<13} {r.variant:<11} {r.seq_len:>6} {r.threads:>3}  skipped: {r.skipped}")
            continue
        ref = next(
            (
                x
                for x in rows
                if x.impl == baseline
                and x.seq_len == r.seq_len
                and x.variant == r.variant
                and x.threads == r.threads
                and not x.skipped
            ),
            None,
        )
        if ref and r.fwd_bwd_ms and ref.fwd_bwd_ms:
            ratio = f"{r.fwd_bwd_ms / ref.fwd_bwd_ms:.2f}"
        else:
            ratio = f"{r.fwd_ms / ref.fwd_ms:.2f} fwd" if ref else "-"
        fb = f"{r.fwd_bwd_ms:.1f}" if r.fwd_bwd_ms is not None else "fwd only"
        print(
            f"{r.impl:<13} {r.variant:<11} {r.seq_len:>6} {r.threads:>3} {r.fwd_ms:>9.1f} {fb:>11}"
            f" {r.peak_mib:>9.1f} {r.fwd_gflops:>9.1f} {r.work:>5.2f} {ratio:>16}"
        )


def plot(results: list[Result], path: Path, title: str) -> None:
    """Figure-1 style: forward time, forward+backward time and peak memory against T."""
    rows = [r for r in results if r.part == "scaling" and not r.skipped]
    fig = Figure(figsize=(16, 4.5))
    axes = fig.subplots(1, 3)
    panels = (
        ("fwd_ms", "forward time (ms)"),
        ("fwd_bwd_ms", "forward+backward time (ms)"),
        ("peak_mib", "peak memory (MiB)"),
    )
    colors = {}
    for ax, (key, ylabel) in zip(axes, panels, strict=True):
        for impl in dict.fromkeys(r.impl for r in rows):
            mine = [r for r in rows if r.impl == impl and getattr(r, key) is not None]
            if not mine:
                continue
            fwd_only = key == "peak_mib" and any(r.fwd_bwd_ms is None for r in mine)
            (line,) = ax.plot(
                [r.seq_len for r in mine],
                [getattr(r, key) for r in mine],
                marker="o",
                label=f"{impl} (forward only)" if fwd_only else impl,
                color=colors.get(impl),
                linestyle="--" if fwd_only else "-",
            )
            colors[impl] = line.get_color()
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if any(r.fwd_bwd_ms is None for r in rows):
        axes[1].set_title("(implementations without a backward here are absent)", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args: argparse.Namespace) -> int:
    impls = [x for x in args.impls.split(",") if x]
    known = available_backends() + list(PEERS) + list(DIAGNOSTICS)
    unknown = [x for x in impls if x not in known]
    if unknown:
        raise ValueError(f"--impls: unknown or unavailable {unknown}; choose from {known}")
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - {"scaling", "variants"}:
        raise ValueError(f"--parts: expected scaling and/or variants, got {args.parts!r}")
    if args.window < 0 or args.dilation < 1 or min(args.variant_dilations, default=1) < 1:
        raise ValueError("--window must be >= 0 and every dilation >= 1")

    top = max(args.threads)
    jobs = []
    if "scaling" in parts:
        for n in args.seq_lens:
            jobs += [(impl, "scaling", Case(n, args.window, args.dilation, args.causal, top)) for impl in impls]
    if "variants" in parts:
        variants = [(1, False), (1, True)] + [(d, False) for d in args.variant_dilations]
        for threads in args.threads:
            for d, causal in variants:
                case = Case(args.target_len, args.window, d, causal, threads)
                # Dense peers ignore the band: only the undilated bidirectional case says something.
                jobs += [
                    (impl, "variants", case)
                    for impl in impls
                    if impl not in DENSE or (d == 1 and not causal and impl == "sdpa")
                ]
    results = []
    for impl, part, case in tqdm(jobs, desc="bench attention", unit="run"):
        results.append(measure(impl, part, case, args))

    title = f"B={args.batch} H={args.heads} D={args.head_dim} w={args.window} {args.dtype} on {args.device}"
    print(title)
    peak = matmul_gflops(args.device, getattr(torch, args.dtype), top)
    print(f"dense matmul reference: {peak:.0f} GFLOP/s with {top} thread(s)")
    baseline = args.baseline or ("flexattention" if devices.on_gpu(args.device) else "kernel")
    print(f"ratios: forward+backward time over {baseline}'s (forward only where there is no backward)")
    print("work: query-key pairs computed, from the tiles each visits, over the band's pairs")
    for part in ("scaling", "variants"):
        print_results(results, part, baseline)

    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if not k.startswith("_")}
    payload = {"config": config, "matmul_gflops": peak, "results": [asdict(r) for r in results]}
    (args.out / "results.json").write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.out / 'results.json'}")
    if not args.no_plot and any(r.part == "scaling" for r in results):
        plot(results, args.out / "plot.png", title)
        print(f"wrote {args.out / 'plot.png'}")
    return 0
