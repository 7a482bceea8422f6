"""Packaging for longformer-fs, including the cuda_ext band kernels.

The CPU extension is always built (with OpenMP, so at::parallel_for uses every core).
The CUDA kernels are added when the installed torch is a CUDA build and a CUDA compiler
is found; otherwise the same module is built CPU-only. Set LONGFORMER_FS_CPU_ONLY=1 to
skip CUDA, or LONGFORMER_FS_MARCH to choose the -march flag (default: native, since the
extension is compiled on the machine that runs it).
"""

import os
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
EXT = "cuda_ext"


def read_version() -> str:
    for line in (ROOT / "longformer_fs" / "version.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("longformer_fs/version.py has no __version__")


def requirements(name: str) -> list[str]:
    """The package lines of a requirements file (comments and blanks left out)."""
    lines = (ROOT / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def extensions():
    import torch
    from torch.utils import cpp_extension

    march = os.environ.get("LONGFORMER_FS_MARCH", "native")
    # -g0 overrides the -g of Python's own CFLAGS: debug info for torch's and pybind11's
    # headers more than doubled binding.cpp's compile (66 s against 29 s on 2 cores).
    cxx = ["-O3", "-g0", "-fopenmp", f"-march={march}"]
    sources = [f"{EXT}/binding.cpp", f"{EXT}/cpu/band_attention_cpu.cpp"]
    include = [str(ROOT / EXT / "include")]
    want_cuda = (
        torch.version.cuda is not None
        and cpp_extension.CUDA_HOME is not None
        and os.environ.get("LONGFORMER_FS_CPU_ONLY", "0") != "1"
    )
    if want_cuda:
        nvcc = ["-O3", "-std=c++17", "--use_fast_math", "-lineinfo"]
        return [
            cpp_extension.CUDAExtension(
                "longformer_fs._band_kernels",
                sources + [f"{EXT}/cuda/band_attention.cu"],
                include_dirs=include,
                define_macros=[("LFS_WITH_CUDA", "1")],
                extra_compile_args={"cxx": cxx, "nvcc": nvcc},
                extra_link_args=["-fopenmp"],
            )
        ]
    return [
        cpp_extension.CppExtension(
            "longformer_fs._band_kernels",
            sources,
            include_dirs=include,
            extra_compile_args={"cxx": cxx},
            extra_link_args=["-fopenmp"],
        )
    ]


def build_ext_class():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(use_ninja=True)


setup(
    name="longformer-fs",
    version=read_version(),
    description="Longformer attention, kernels and recipes as a fairseq plugin",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["longformer_fs", "longformer_fs.*", "data_prep", "data_prep.*"]),
    # torch and fairseq-fixed are installed by `make install` (see the Makefile for why
    # they are not ordinary requirements); the rest is in requirements.txt.
    install_requires=[],
    extras_require={"onnx": requirements("requirements-onnx.txt")},
    ext_modules=extensions(),
    cmdclass={"build_ext": build_ext_class()},
    entry_points={"console_scripts": ["longformer-fs=longformer_fs.cli:main"]},
)
