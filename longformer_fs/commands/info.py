"""``longformer-fs info``: versions, hardware, the attention backends and auto's choice, apex."""

from __future__ import annotations

import argparse
import contextlib
import json

from .. import devices
from ..environment import collect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Versions, hardware, the attention backends that run here, which one `auto` picks on each device "
        "and why (on a GPU: the fastest that `longformer-fs check --device cuda` measured there, the CUDA "
        "kernels only once that check passed for this GPU and build), the timings it recorded, and which of "
        "NVIDIA apex's fused kernels fairseq would use."
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="answer for an sm90 GPU that `check` never measured, on this machine (the rehearsal's GPU: "
        "longformer_fs.devices): what `auto` would take there, without one",
    )


def main(args: argparse.Namespace) -> int:
    with devices.rehearsal() if args.rehearse else contextlib.nullcontext():
        report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("versions")
    for name, version in report["versions"].items():
        print(f"  {name:<14} {version}")
    hw = report["hardware"]
    print("hardware")
    print(f"  {'cpu threads':<14} {hw['cpu_threads']} (OpenMP {'yes' if hw['openmp'] else 'no'})")
    print(f"  {'cuda':<14} {hw['cuda'] or 'not available'}")
    for i, gpu in enumerate(hw["gpus"]):
        print(f"  {'gpu ' + str(i):<14} {gpu}")
    ext = report["extension"]
    state = (
        f"build {ext['build']}, CUDA kernels {'yes' if ext['cuda_kernels'] else 'no'}" if ext["built"] else "not built"
    )
    print(f"kernel extension: {state}")
    print("attention backends")
    for name, b in report["attention_backends"].items():
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        note = f" ({b['note']})" if b["note"] else ""
        print(f"  {name:<14} {b['summary']}; {state}{note}")
    print("auto chooses")
    for call, choice in report["auto"].items():
        print(f"  {call:<30} {choice['reason']}")
    for gpu, timings in report["measured"].items():
        if not timings:
            print(f"{gpu}: no backend timings for this build; `longformer-fs check --device cuda` measures them")
        for dtype, kinds in timings.items():
            for kind, times in kinds.items():
                ranked = ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(times.items(), key=lambda x: x[1]))
                print(f"{gpu}, fwd+bwd {dtype} {kind}: {ranked}")
    apex = report["apex"]
    if apex["installed"]:
        uses = [name for name, value in apex["fairseq_uses"].items() if value]
        print(
            f"apex: installed; fairseq uses {', '.join(uses) if uses else 'none of its kernels'}"
            + (f" ({apex['note']})" if apex["note"] else "")
        )
    else:
        extra = " (the 'apex' found is PyPI's unrelated package)" if apex["unrelated_apex"] else ""
        print(f"apex: not installed{extra}; fairseq uses torch's LayerNorm and Adam (see the README to build apex)")
    return 0
