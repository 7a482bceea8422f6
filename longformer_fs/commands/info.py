"""``longformer-fs info``: versions, hardware, and which attention backends run here."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform

import torch

from longformer_fs.attention.backends import AUTO_ORDER, BACKENDS, get_backend


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def collect() -> dict:
    backends = {
        name: {"available": b.available, "summary": b.summary, "reason": b.unavailable_reason()}
        for name, b in BACKENDS.items()
    }
    cuda = torch.cuda.is_available()
    return {
        "versions": {
            "longformer-fs": _version("longformer-fs"),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "fairseq": _version("fairseq-fixed"),
            "hydra-core": _version("hydra-core"),
            "omegaconf": _version("omegaconf"),
            "numpy": _version("numpy"),
            "transformers": _version("transformers"),
        },
        "hardware": {
            "cpu_threads": torch.get_num_threads(),
            "openmp": torch.backends.openmp.is_available(),
            "cuda": torch.version.cuda if cuda else None,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        },
        "attention_backends": backends,
        "auto_backend": get_backend("auto").name,
        "auto_order": list(AUTO_ORDER),
    }


def main(args: argparse.Namespace) -> int:
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
    print(f"attention backends (auto -> {report['auto_backend']})")
    for name, b in report["attention_backends"].items():
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        print(f"  {name:<14} {b['summary']}; {state}")
    return 0
