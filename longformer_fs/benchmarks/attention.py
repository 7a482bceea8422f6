"""``longformer-fs bench attention``: time and peak memory against sequence length.

Every implementation runs on the same inputs in one process, so the printed ratios are
side by side. Dense implementations are skipped (and say so) where their T x T buffers
would not fit in memory.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from longformer_fs.attention import available_backends, banded_attention

from .measure import median_time, peak_memory_bytes

PEERS = {"sdpa": "dense full attention, torch SDPA (no band)"}


@dataclass
class Result:
    impl: str
    seq_len: int
    threads: int
    fwd_ms: float | None = None
    fwd_bwd_ms: float | None = None
    peak_mib: float | None = None
    skipped: str | None = None


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    impls = ",".join(available_backends() + list(PEERS))
    parser.add_argument("--impls", default=impls,
                        help="comma-separated implementations: attention backends "
                             f"({', '.join(available_backends())}) and peers ({', '.join(PEERS)})")
    parser.add_argument("--seq-lens", type=_int_list, default=[1024, 4096, 16384], help="sequence lengths T")
    parser.add_argument("--window", type=int, default=256, help="one-sided window w")
    parser.add_argument("--dilation", type=int, default=1, help="dilation d for every head")
    parser.add_argument("--causal", action="store_true", help="causal (autoregressive) band")
    parser.add_argument("--heads", type=int, default=8, help="heads H")
    parser.add_argument("--head-dim", type=int, default=64, help="head dimension D")
    parser.add_argument("--batch", type=int, default=1, help="batch size B")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=_int_list, default=[torch.get_num_threads()],
                        help="CPU thread counts to measure, e.g. 1,2")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (median reported)")
    parser.add_argument("--out", type=Path, default=Path("bench_out/attention"),
                        help="directory for results.json and plot.png")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG plot")


def _dense_bytes_needed(args, seq_len: int) -> int:
    # fwd+bwd of a dense masked attention keeps about six (B, H, T, T) fp32 buffers.
    return 6 * args.batch * args.heads * seq_len * seq_len * 4


def _available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _make_call(impl: str, args, q, k, v):
    if impl == "sdpa":
        qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
        return lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal)
    return lambda: banded_attention(q, k, v, args.window, args.dilation, args.causal, backend=impl)


def measure(impl: str, args, seq_len: int, threads: int) -> Result:
    device = torch.device(args.device)
    result = Result(impl, seq_len, threads)
    if impl == "reference" and _dense_bytes_needed(args, seq_len) > 0.8 * _available_memory(device):
        result.skipped = f"needs ~{_dense_bytes_needed(args, seq_len) / 2**30:.0f} GiB"
        return result
    dtype = getattr(torch, args.dtype)
    shape = (args.batch, seq_len, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    call = _make_call(impl, args, q, k, v)

    def fwd_bwd():
        call().float().sum().backward()

    budget = 30.0  # seconds per measurement: slow dense runs get fewer repeats
    with torch.no_grad():
        result.fwd_ms = 1e3 * median_time(call, device, args.repeat, budget_s=budget)
    result.fwd_bwd_ms = 1e3 * median_time(fwd_bwd, device, args.repeat, budget_s=budget)
    result.peak_mib = peak_memory_bytes(fwd_bwd, device) / 2**20
    return result


def print_table(results: list[Result], baseline: str = "chunks") -> None:
    base = {(r.seq_len, r.threads): r for r in results if r.impl == baseline and not r.skipped}
    print(f"{'impl':<10} {'T':>6} {'thr':>3} {'fwd ms':>9} {'fwd+bwd ms':>11} {'peak MiB':>9}"
          f" {'fwd x' + baseline:>12} {'f+b x' + baseline:>12}")
    for r in results:
        if r.skipped:
            print(f"{r.impl:<10} {r.seq_len:>6} {r.threads:>3}  skipped: {r.skipped}")
            continue
        b = base.get((r.seq_len, r.threads))
        ratio_f = f"{r.fwd_ms / b.fwd_ms:.2f}" if b else "-"
        ratio_fb = f"{r.fwd_bwd_ms / b.fwd_bwd_ms:.2f}" if b else "-"
        print(f"{r.impl:<10} {r.seq_len:>6} {r.threads:>3} {r.fwd_ms:>9.1f} {r.fwd_bwd_ms:>11.1f}"
              f" {r.peak_mib:>9.1f} {ratio_f:>12} {ratio_fb:>12}")


def plot(results: list[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (impl, threads) in sorted({(r.impl, r.threads) for r in results}):
        rows = [r for r in results if r.impl == impl and r.threads == threads and not r.skipped]
        if not rows:
            continue
        xs = [r.seq_len for r in rows]
        label = impl if len({r.threads for r in results}) == 1 else f"{impl} ({threads} thr)"
        line, = ax_t.plot(xs, [r.fwd_bwd_ms for r in rows], marker="o", label=label)
        ax_m.plot(xs, [r.peak_mib for r in rows], marker="o", color=line.get_color(), label=label)
    for ax, ylabel in ((ax_t, "forward+backward time (ms)"), (ax_m, "peak memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    impls = [x for x in args.impls.split(",") if x]
    known = set(available_backends()) | set(PEERS)
    unknown = [x for x in impls if x not in known]
    if unknown:
        raise ValueError(f"--impls: unknown or unavailable {unknown}; choose from {sorted(known)}")
    if args.window < 0 or args.dilation < 1:
        raise ValueError("--window must be >= 0 and --dilation >= 1")
    jobs = [(t, n, impl) for t in args.threads for n in args.seq_lens for impl in impls]
    results = []
    for threads, seq_len, impl in tqdm(jobs, desc="bench attention", unit="run"):
        torch.set_num_threads(threads)
        results.append(measure(impl, args, seq_len, threads))

    title = (f"B={args.batch} H={args.heads} D={args.head_dim} w={args.window} d={args.dilation}"
             f"{' causal' if args.causal else ''} {args.dtype} on {args.device}")
    print(title)
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if not k.startswith("_")}
    (args.out / "results.json").write_text(json.dumps(
        {"config": config, "results": [asdict(r) for r in results]}, indent=2))
    print(f"wrote {args.out / 'results.json'}")
    if not args.no_plot:
        plot(results, args.out / "plot.png", title)
        print(f"wrote {args.out / 'plot.png'}")
    return 0
