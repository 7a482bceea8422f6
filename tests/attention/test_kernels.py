"""cuda_ext: the compiled band kernels (CPU here; CUDA where a GPU exists)."""

import itertools
import shutil
import subprocess  # the compilers, side by side: each is a program of its own
import sysconfig

import pytest
import torch
from helpers import ROOT
from oracle import oracle_attention

from longformer_fs.attention import LongformerSelfAttention, available_backends, band, banded_attention

EXT = ROOT / "cuda_ext"

needs_kernel = pytest.mark.skipif("kernel" not in available_backends(), reason="cuda_ext extension not built")


def needs_gpu(test):
    """Skipped without CUDA, and marked ``gpu``: ``longformer-fs report`` runs them (``pytest -m gpu``)."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")(test))


def ext():
    import longformer_fs._band_kernels as module

    return module


# ------------------------------------------------------------------ shared index math


@needs_kernel
@pytest.mark.parametrize("window,dilation,causal", list(itertools.product((0, 1, 4), (1, 2, 3), (False, True))))
def test_header_index_math_matches_python_reference(window, dilation, causal):
    """band_index.h (compiled by g++ into the extension) against band.py."""
    seq_len = 19
    width = band.band_width(window, causal)
    for query in range(seq_len):
        for column in range(width):
            key = band.band_key(query, column, window, dilation)
            for probe_key in (key, key + 1):
                for residue in range(dilation):
                    got = ext().index_probe(query, column, probe_key, window, dilation, causal, seq_len, residue)
                    column_py = band.band_column(query, probe_key, window, dilation, causal)
                    n = len(range(residue, seq_len, dilation))
                    lo = max(0, query - window)
                    hi = min(seq_len, query + 1 + (0 if causal else window))
                    assert got == [
                        width,
                        key,
                        -1 if column_py is None else column_py,
                        n,
                        band.effective_window(window, seq_len, 1),
                        lo,
                        hi,
                    ]


# ------------------------------------------------------------------ CUDA compile check


def _nvcc():
    return shutil.which("nvcc") or (shutil.which("nvcc", path="/usr/local/cuda/bin"))


@pytest.fixture(scope="module")
def compilations(tmp_path_factory):
    """The compile-only checks, started together: ``{job: (exit code, output)}``. nvcc
    builds every .cu for Ampere and Hopper (``"NAME sm_80"``, ``"NAME sm_90"``; CI has nvcc
    but no GPU) where nvcc is installed; g++ reads binding.cpp's CUDA branch against this
    torch's headers (``"binding.cpp"``; no CUDA headers needed). The device code is not
    optimised (``-Xcicc -O0 -Xptxas -O0``): every template is still instantiated, lowered to
    PTX and assembled for each architecture, in 2 s instead of 23 s a file; the extension's
    own build optimises."""
    from torch.utils.cpp_extension import include_paths

    out = tmp_path_factory.mktemp("compiled")
    commands = {}
    for src, arch in itertools.product(sorted(EXT.rglob("*.cu")) if _nvcc() else [], ("80", "90")):
        commands[f"{src.name} sm_{arch}"] = [
            _nvcc(),
            "-std=c++17",
            "-O3",
            "-Xcicc",
            "-O0",
            "-Xptxas",
            "-O0",
            "-DLFS_WITH_CUDA",
            f"-I{EXT / 'include'}",
            f"-gencode=arch=compute_{arch},code=sm_{arch}",
            "-c",
            str(src),
            "-o",
            str(out / f"{src.stem}_{arch}.o"),
        ]
    commands["binding.cpp"] = [
        "g++",
        "-std=c++20",
        "-fsyntax-only",
        "-DLFS_WITH_CUDA",
        "-DTORCH_EXTENSION_NAME=_band_kernels",
        f"-I{EXT / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        *(f"-I{p}" for p in include_paths()),
        str(EXT / "binding.cpp"),
    ]
    jobs = {
        name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, cmd in commands.items()
    }
    outputs = {name: proc.communicate(timeout=600)[0] for name, proc in jobs.items()}
    return {name: (proc.returncode, outputs[name]) for name, proc in jobs.items()}


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed")
def test_cuda_sources_compile_for_sm80_and_sm90(compilations):
    """CI has no GPU but has nvcc: every .cu must compile for Ampere and Hopper."""
    sources = sorted(EXT.rglob("*.cu"))
    assert sources, "no .cu files found"
    for src, arch in itertools.product(sources, ("80", "90")):
        code, out = compilations[f"{src.name} sm_{arch}"]
        assert code == 0, f"{src.name} sm_{arch} failed:\n{out}"


def test_binding_cuda_branch_compiles(compilations):
    """binding.cpp with LFS_WITH_CUDA, against this torch's headers (no CUDA headers needed)."""
    code, out = compilations["binding.cpp"]
    assert code == 0, out[-3000:]


# ------------------------------------------------------------------ numerics


def _dense_oracle(q, k, v, window, dilations, causal, pad):
    return oracle_attention(q.double(), k.double(), v.double(), window, dilations, causal, pad)


@needs_kernel
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_fp32_within_1e5_of_float64_oracle(causal):
    """Realistic head size (D=64) and a window that spans several kernel blocks."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 150, 2, 64, generator=gen) for _ in range(3))
    pad = torch.zeros(2, 150, dtype=torch.bool)
    pad[1, 120:] = True
    dilations = (1, 3)
    out = banded_attention(q, k, v, 40, dilations, causal, pad, backend="kernel")
    expected = _dense_oracle(q, k, v, 40, dilations, causal, pad)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)


@needs_kernel
@pytest.mark.parametrize(
    "seq_len,window,dilation",
    [
        (5, 3, 1),  # T < 2w + 1
        (50, 0, 1),  # w = 0: each token sees itself
        (17, 9, 2),  # d * w >= T
        (97, 5, 3),
    ],  # T not a multiple of any tile or of d
)
def test_edge_shapes_single_batch_and_head(seq_len, window, dilation):
    """B * H = 1 leaves one work item; shapes around the tile and window edges."""
    q, k, v = (torch.randn(1, seq_len, 1, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        out = banded_attention(q, k, v, window, dilation, causal, backend="kernel")
        expected = oracle_attention(q, k, v, window, (dilation,), causal)
        torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    assert torch.autograd.gradcheck(
        lambda a, b, c: banded_attention(a, b, c, window, dilation, backend="kernel"), (q, k, v)
    )


@needs_kernel
@pytest.mark.parametrize("window,dilation", list(itertools.product((1, 2, 3), (1, 2, 3))))
def test_gradcheck_float64_tiny(window, dilation):
    q, k, v = (torch.randn(1, 9, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pad = torch.zeros(1, 9, dtype=torch.bool)
    pad[0, 7:] = True
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, c: banded_attention(a, b, c, window, dilation, causal, pad, backend="kernel"), (q, k, v)
        )


@needs_kernel
def test_layer_with_globals_and_lse_gradient():
    """The layer merges the kernel's band with global keys through its lse: exercises dlse."""
    from oracle import oracle_layer

    layer = LongformerSelfAttention(12, 3, 2, (1, 2, 1), backend="kernel").double()
    x = torch.randn(15, 2, 12, dtype=torch.float64, requires_grad=True)
    glob = torch.zeros(2, 15, dtype=torch.bool)
    glob[0, [0, 7]] = True
    pad = torch.zeros(2, 15, dtype=torch.bool)
    pad[1, 11:] = True
    torch.testing.assert_close(layer(x, pad, glob), oracle_layer(layer, x, pad, glob), atol=1e-10, rtol=1e-10)
    assert torch.autograd.gradcheck(lambda xi: layer(xi, pad, glob), (x,))


@needs_kernel
def test_auto_uses_kernel_but_not_for_dropout():
    from longformer_fs.attention.backends import get_backend
    from longformer_fs.attention.spec import BandSpec

    assert get_backend("auto").name == "kernel"
    assert get_backend("auto", BandSpec(4, (1,), False, 1.0, dropout_p=0.1)).name == "chunks"
    layer = LongformerSelfAttention(8, 2, 2, dropout=0.5)  # auto
    layer.train()
    layer(torch.randn(6, 1, 8)).sum().backward()  # runs (through chunks)
    kernel_layer = LongformerSelfAttention(8, 2, 2, dropout=0.5, backend="kernel").train()
    with pytest.raises(ValueError, match="^backend:.*dropout"):
        kernel_layer(torch.randn(6, 1, 8))


# ------------------------------------------------------------------ bad input at the binding


@needs_kernel
@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: [torch.randn(1, 2, 5, 4, dtype=torch.float64)] + [torch.randn(1, 2, 5, 4)] * 2, "dtype"),
        (lambda: [torch.ones(1, 2, 5, 4, dtype=torch.int32)] * 3, "unsupported dtype"),
        (lambda: [torch.randn(2, 5, 4)] * 3, "4 dimensions"),
        (lambda: [torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 5, 4)], "shape"),
    ],
)
def test_binding_rejects_bad_input(make, match):
    q, k, v = make()
    with pytest.raises(ValueError, match=match):
        ext().forward(q, k, v, None, [1] * q.shape[1] if q.dim() == 4 else [1], 2, False, 0.5, None, None, 0)


@needs_kernel
def test_binding_rejects_bad_mask_and_dilation():
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="key_ok"):
        ext().forward(q, q, q, torch.ones(1, 4, dtype=torch.bool), [1, 1], 2, False, 0.5, None, None, 0)
    with pytest.raises(ValueError, match="dilation"):
        ext().forward(q, q, q, None, [1], 2, False, 0.5, None, None, 0)


@needs_kernel
def test_binding_rejects_bad_position_term():
    q = torch.randn(1, 2, 5, 4)
    table = torch.randn(2, 3, 4)  # causal w=2: W = 3
    with pytest.raises(ValueError, match="together"):
        ext().forward(q, q, q, None, [1, 1], 2, True, 0.5, q, None, 0)
    with pytest.raises(ValueError, match=r"table: expected shape \(H, W, D\) = \(2, 5, 4\)"):
        ext().forward(q, q, q, None, [1, 1], 2, False, 0.5, q, table, 0)  # bidirectional needs W = 5
    with pytest.raises(ValueError, match="pos_query: shape"):
        ext().forward(q, q, q, None, [1, 1], 2, True, 0.5, q[:, :, :4], table, 0)


# ------------------------------------------------------------------ GPU


@needs_gpu
@needs_kernel
def test_gpu_build_has_cuda():
    assert ext().has_cuda(), "torch has CUDA but the extension was built CPU-only"


@needs_gpu
@needs_kernel
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.float16, 1e-2), (torch.bfloat16, 5e-2)])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_matches_oracle(dtype, atol, causal):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 200, 4, 64, generator=gen) for _ in range(3))
    pad = torch.zeros(2, 200, dtype=torch.bool)
    pad[0, 170:] = True
    dil = (1, 2, 3, 1)
    rounded = [x.to(dtype).double() for x in (q, k, v)]
    expected = oracle_attention(*rounded, 24, dil, causal, pad)
    out = banded_attention(*(x.to(dtype).cuda() for x in (q, k, v)), 24, dil, causal, pad.cuda(), backend="kernel")
    assert out.dtype == dtype
    torch.testing.assert_close(out.double().cpu(), expected, atol=atol, rtol=0)

    grads = [x.to(dtype).cuda().requires_grad_() for x in (q, k, v)]
    weight = torch.randn(q.shape, generator=gen)
    (banded_attention(*grads, 24, dil, causal, pad.cuda(), backend="kernel").float() * weight.cuda()).sum().backward()
    ref = [x.clone().requires_grad_() for x in rounded]
    (oracle_attention(*ref, 24, dil, causal, pad) * weight.double()).sum().backward()
    for g, r in zip(grads, ref, strict=True):
        torch.testing.assert_close(g.grad.double().cpu(), r.grad, atol=atol * 10, rtol=atol)


@needs_gpu
@needs_kernel
def test_gpu_gradcheck_float64():
    q, k, v = (torch.randn(1, 11, 2, 4, dtype=torch.float64, device="cuda", requires_grad=True) for _ in range(3))
    for window, dilation, causal in itertools.product((1, 3), (1, 2), (False, True)):
        assert torch.autograd.gradcheck(
            lambda a, b, c: banded_attention(a, b, c, window, dilation, causal, backend="kernel"), (q, k, v)
        )


@needs_gpu
@needs_kernel
def test_gpu_rejects_mixed_devices():
    q = torch.randn(1, 2, 5, 4, device="cuda")
    with pytest.raises(ValueError, match="is on cpu"):
        ext().forward(q, q.cpu(), q, None, [1, 1], 2, False, 0.5, None, None, torch.cuda.current_stream().cuda_stream)
