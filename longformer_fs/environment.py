"""What this installation can use: versions, devices, attention backends and ``auto``'s
choice with its reason, and NVIDIA apex's fused kernels as fairseq takes them.

``longformer-fs info`` prints it; tests read it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch

from . import devices
from .attention.backends import AUTO_ORDER, BACKENDS, backend_notes, choose_backend
from .attention.backends import kernel as kernel_backend
from .attention.spec import BandSpec
from .verification import records

# A plain call, a training call of the fine-tuning, MLM and LED recipes (their attention
# dropout) and a character-LM call (relative positions): auto may answer each differently.
# The names are the kinds that benchmarks and the rehearsal record calls by (attention.calls).
_PROBES = {
    "plain": BandSpec(256, (1,), False, 0.125),
    "plain + dropout": BandSpec(256, (1,), False, 0.125, 0.1),
    "relative": BandSpec(256, (1,), True, 0.125, relative=True),
}
# The dtypes a GPU's choices are shown for: the recipes' fp32, fp16 and bf16 (check's timings
# are kept by dtype).
_GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def auto_choices() -> dict:
    """Per device type here (cpu, and cuda when present), probe call and (on CUDA, where
    ``check``'s timings differ by dtype) training dtype: backend and reason. In a rehearsal
    the GPU's entries are the rehearsed GPU's (its device is ``meta``)."""
    calls = [("cpu", "cpu", torch.float32, "")]
    if devices.cuda_runtime():
        gpu = devices.default_device()
        for dtype in _GPU_DTYPES:
            calls.append(("cuda", gpu, dtype, "/" + str(dtype).replace("torch.", "")))
    choices = {}
    for name, device, dtype, suffix in calls:
        for probe, spec in _PROBES.items():
            try:
                backend, reason = choose_backend(spec, torch.device(device), dtype)
                choices[f"{name}/{probe}{suffix}"] = {"backend": backend.name, "reason": reason}
            except RuntimeError as err:
                choices[f"{name}/{probe}{suffix}"] = {"backend": None, "reason": str(err)}
    return choices


def measured_timings() -> dict:
    """Per GPU here: the forward+backward milliseconds ``longformer-fs check`` recorded for
    this build, ``{dtype: {kind: {backend: ms}}}`` (empty where it measured nothing)."""
    if not torch.cuda.is_available():
        return {}
    build = kernel_backend.build_id()
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return {devices.gpu_name(gpu): (records.record_for(gpu, build) or {}).get("timings", {}) for gpu in gpus}


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
    on_gpu = devices.cuda_runtime()
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
    notes = backend_notes()
    backends = {
        name: {
            "available": b.available,
            "summary": b.summary,
            "reason": b.unavailable_reason(),
            "note": notes.get(name),  # what it runs on a CPU when that is not its own computation
        }
        for name, b in BACKENDS.items()
    }
    cuda = devices.cuda_runtime()
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
            "gpus": devices.gpu_names(),
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
