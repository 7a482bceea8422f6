"""Packaging for longformer-fs.

The C++/CUDA extension in ``cuda_ext/`` is added here by the kernels work; until then the
package is pure Python and the ``"kernel"`` attention backend reports itself unavailable.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def read_version() -> str:
    for line in (ROOT / "longformer_fs" / "version.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("longformer_fs/version.py has no __version__")


setup(
    name="longformer-fs",
    version=read_version(),
    description="Longformer attention, kernels and recipes as a fairseq plugin",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["longformer_fs", "longformer_fs.*"]),
    # torch and fairseq-fixed are installed by `make install` (see the Makefile for why
    # they are not ordinary requirements); the rest is in requirements.txt.
    install_requires=[],
    entry_points={"console_scripts": ["longformer-fs=longformer_fs.cli:main"]},
)
