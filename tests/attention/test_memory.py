"""The "chunks" backend never materialises a T x T tensor: memory is O(T * w)."""

import pytest
import torch

from longformer_fs.attention import banded_attention
from longformer_fs.benchmarks.measure import peak_memory_bytes

HEADS, HEAD_DIM, WINDOW = 2, 32, 64


def fwd_bwd_peak(backend, seq_len, causal=False, dilation=1):
    q, k, v = (torch.randn(1, seq_len, HEADS, HEAD_DIM, requires_grad=True) for _ in range(3))

    def run():
        banded_attention(q, k, v, WINDOW, dilation, causal, backend=backend).sum().backward()

    return peak_memory_bytes(run)


def test_measurement_sees_quadratic_memory():
    """Positive control: the dense reference at T=2048 shows its H x T x T scores."""
    seq_len = 2048
    assert fwd_bwd_peak("reference", seq_len) >= HEADS * seq_len * seq_len * 4


@pytest.mark.parametrize("causal,dilation", [(False, 1), (True, 1), (False, 3)])
def test_chunks_memory_is_linear_at_16k(causal, dilation):
    seq_len = 16384
    peak = fwd_bwd_peak("chunks", seq_len, causal, dilation)
    scores = HEADS * seq_len * seq_len * 4  # the dense per-head fp32 scores: 2 GiB
    assert peak < scores / 10, f"peak {peak / 2**20:.0f} MiB"
    band = HEADS * seq_len * (2 * WINDOW + 1) * 4  # one (H, T, 2w+1) fp32 buffer
    assert peak < 10 * band, f"peak {peak / 2**20:.0f} MiB = {peak / band:.1f} band buffers"
    # Linear in T: 4x the length costs about 4x, where T^2 would cost 16x.
    assert peak < 4.5 * fwd_bwd_peak("chunks", seq_len // 4, causal, dilation)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_memory_holds_no_band(causal):
    """The fused kernel keeps no (H, T, W) buffer: its peak is a few (H, T, D) tensors."""
    from longformer_fs.attention import available_backends

    if "kernel" not in available_backends():
        pytest.skip("cuda_ext extension not built")
    seq_len = 16384
    peak = fwd_bwd_peak("kernel", seq_len, causal)
    rows = HEADS * seq_len * HEAD_DIM * 4  # one (H, T, D) fp32 tensor
    assert peak < 12 * rows, f"peak {peak / 2**20:.0f} MiB = {peak / rows:.1f} (H, T, D) tensors"
    band = HEADS * seq_len * (2 * WINDOW + 1) * 4
    assert peak < 2 * band
