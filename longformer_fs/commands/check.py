"""``longformer-fs check``: the compiled kernels against float64 on this machine's device,
then the speed of every backend ``auto`` could choose there."""

from __future__ import annotations

import argparse
import json

import torch
from tqdm import tqdm

from .. import devices
from ..attention.backends import KINDS, choose_backend
from ..attention.spec import BandSpec
from ..verification.backend_speed import SHAPES, measure_backends
from ..verification.kernel_check import CASES, run_check, save_report
from .options import add_device_argument

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def _dtypes(text: str) -> list[torch.dtype]:
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in DTYPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(DTYPES)}, got {text!r}")
    return [DTYPES[x] for x in names]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the band kernels on DEVICE against a float64 computation on the CPU: forward outputs and "
        "log-sum-exps, and the gradients of q, k, v, the position term and the log-sum-exp, for windows with "
        "dilation, causal windows, padding and the relative-position term, in each dtype. The result is "
        "recorded for this device and this build of the extension: `auto` uses the CUDA kernels only where "
        "it passed (see `longformer-fs info`). Rebuilding the extension needs a new check. Then (by default on "
        "CUDA) every backend `auto` could choose, the kernels only if they passed, is timed forward+backward "
        f"per dtype, plain and with the relative-position term, at one shape (CUDA: {SHAPES['cuda']}); `auto` on "
        "this GPU takes the fastest."
    )
    add_device_argument(parser, help="cuda, cuda:N or cpu")
    parser.add_argument(
        "--dtypes",
        type=_dtypes,
        default=[torch.float32, torch.float16, torch.bfloat16],
        help="comma-separated input dtypes (float32, float16, bfloat16, float64)",
    )
    parser.add_argument(
        "--timing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time the backends after the check (default: on CUDA only)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    device = torch.device(args.device)
    # meta only as the rehearsal's GPU (longformer-fs report --rehearse)
    if device.type not in ("cuda", "cpu") and not devices.rehearsing(device):
        raise ValueError(f"--device: expected cuda, cuda:N or cpu, got {args.device!r}")
    if devices.on_gpu(device) and not devices.cuda_runtime():
        raise ValueError("--device: no CUDA device is visible here (torch.cuda.is_available() is False)")
    report = run_check(device, args.dtypes, CASES, lambda jobs: tqdm(jobs, desc="check", unit="case"))
    path = save_report(report)  # first: timing takes the kernels as candidates only once this passed
    timings = {}
    if args.timing or (args.timing is None and devices.on_gpu(device)):
        timings = measure_backends(device, args.dtypes, progress=lambda jobs: tqdm(jobs, desc="timing", unit="run"))
        path = save_report(report, timings)
    if args.json:
        print(
            json.dumps(
                {
                    "passed": report.passed,
                    "device": report.device,
                    "build": report.build,
                    "results": [r.__dict__ for r in report.results],
                    "timings_ms": timings,
                },
                indent=2,
            )
        )
    else:
        print(f"{report.device}, extension build {report.build}, torch {report.torch}")
        print(f"{'case':<44} {'dtype':<9} {'worst output':<12} {'error':>9} {'tolerance':>9}  result")
        for r in report.results:
            if r.error is not None:
                print(f"{r.case:<44} {r.dtype:<9} {'-':<12} {'-':>9} {r.tolerance:>9.0e}  FAIL ({r.error})")
                continue
            worst = max(r.errors, key=lambda name: r.errors[name])
            print(
                f"{r.case:<44} {r.dtype:<9} {worst:<12} {r.errors[worst]:>9.2e} {r.tolerance:>9.0e}  "
                f"{'pass' if r.passed else 'FAIL'}"
            )
        print(f"{len(report.results) - len(report.failures)}/{len(report.results)} passed; recorded in {path}")
        for dtype, kinds in timings.items():
            for kind, times in kinds.items():
                ranked = ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(times.items(), key=lambda x: x[1]))
                print(f"fwd+bwd {dtype:<9} {kind:<9} {ranked}")
        for dtype in args.dtypes:
            for kind in KINDS:
                spec = BandSpec(256, (1,), kind == "relative", 0.125, relative=kind == "relative")
                _, reason = choose_backend(spec, device, dtype)
                print(f"auto now ({str(dtype).replace('torch.', '')}, {kind}): {reason}")
    return 0 if report.passed else 1
