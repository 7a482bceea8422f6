"""What this installation can use: versions, devices, attention backends and ``auto``'s
choice with its reason, and NVIDIA apex's fused kernels as fairseq takes them.

``longformer-fs info`` prints it; tests read it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch

from .attention import check_records
from .attention.backends import AUTO_ORDER, BACKENDS, choose_backend
from .attention.backends import kernel as kernel_backend
from .attention.spec import BandSpec

# A plain call and a character-LM call (relative positions): auto may answer differently.
_PROBES = {"plain": BandSpec(256, (1,), False, 0.125), "relative": BandSpec(256, (1,), True, 0.125, relative=True)}


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def auto_choices() -> dict:
    """Per device type here (cpu, and cuda when present), probe call and (on CUDA, where
    ``check``'s timings differ by dtype) training dtype: backend and reason."""
    calls = [("cpu", torch.float32, "")]
    if torch.cuda.is_available():
        calls += [("cuda", dtype, "/" + str(dtype).replace("torch.", "")) for dtype in (torch.float32, torch.bfloat16)]
    choices = {}
    for device, dtype, suffix in calls:
        for probe, spec in _PROBES.items():
            try:
                backend, reason = choose_backend(spec, torch.device(device), dtype)
                choices[f"{device}/{probe}{suffix}"] = {"backend": backend.name, "reason": reason}
            except RuntimeError as err:
                choices[f"{device}/{probe}{suffix}"] = {"backend": None, "reason": str(err)}
    return choices


def measured_timings() -> dict:
    """Per GPU here: the forward+backward milliseconds ``longformer-fs check`` recorded for
    this build, ``{dtype: {kind: {backend: ms}}}`` (empty where it measured nothing)."""
    if not torch.cuda.is_available():
        return {}
    build = kernel_backend.build_id()
    return {
        torch.cuda.get_device_name(i): (check_records.record_for(torch.device("cuda", i), build) or {}).get(
            "timings", {}
        )
        for i in range(torch.cuda.device_count())
    }


def apex_report() -> dict:
    """Whether NVIDIA apex is importable, and which of its kernels fairseq would use.

    fairseq takes them only on CUDA: fused LayerNorm (``fairseq.modules.layer_norm``),
    FusedAdam for ``--optimizer adam`` (unless ``--use-old-adam``), FusedLAMB, the fused
    cross entropy (``apex.contrib.xentropy``), and ``amp_C``'s multi-tensor L2 norm for
    gradient clipping. PyPI's package named ``apex`` is an unrelated web framework.
    """
    import fairseq.modules.cross_entropy as fairseq_xent
    import fairseq.modules.layer_norm as fairseq_layer_norm
    import fairseq.utils as fairseq_utils
    from fairseq.optim.fused_adam import get_fused_adam_class

    spec = importlib.util.find_spec("apex")
    nvidia = spec is not None and importlib.util.find_spec("apex.normalization") is not None
    adam = get_fused_adam_class()
    on_gpu = torch.cuda.is_available()
    kernels = {
        "fused_layer_norm": bool(getattr(fairseq_layer_norm, "has_fused_layernorm", False)),
        "fused_adam": adam.__name__ if adam is not None else None,
        "fused_cross_entropy": hasattr(fairseq_xent, "xentropy"),
        "multi_tensor_l2norm": bool(getattr(fairseq_utils, "multi_tensor_l2norm_available", False)),
    }
    return {
        "installed": nvidia,
        "unrelated_apex": spec is not None and not nvidia,
        "fairseq_uses": {name: value if on_gpu else None for name, value in kernels.items()} if nvidia else {},
        "available_kernels": kernels,
        "note": None if on_gpu else "no GPU: fairseq uses torch's LayerNorm and Adam on CPU, with or without apex",
    }


def collect() -> dict:
    backends = {
        name: {"available": b.available, "summary": b.summary, "reason": b.unavailable_reason()}
        for name, b in BACKENDS.items()
    }
    cuda = torch.cuda.is_available()
    return {
        "versions": {
            "longformer-fs": version("longformer-fs"),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "fairseq": version("fairseq-fixed"),
            "hydra-core": version("hydra-core"),
            "omegaconf": version("omegaconf"),
            "numpy": version("numpy"),
            "transformers": version("transformers"),
        },
        "hardware": {
            "cpu_threads": torch.get_num_threads(),
            "openmp": torch.backends.openmp.is_available(),
            "cuda": torch.version.cuda if cuda else None,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        },
        "extension": {
            "built": kernel_backend.unavailable_reason() is None,
            "cuda_kernels": kernel_backend.has_cuda(),
            "build": kernel_backend.build_id(),
        },
        "attention_backends": backends,
        "auto_order": {device: list(order) for device, order in AUTO_ORDER.items()},
        "auto": auto_choices(),
        "measured": measured_timings(),
        "apex": apex_report(),
    }
