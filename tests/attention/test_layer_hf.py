"""The layer against HF transformers' LongformerSelfAttention: a second, independent oracle.

HF supports the non-dilated, non-causal pattern with global tokens and needs T to be a
multiple of its attention_window (= 2w). No download: the module is built from a config.
"""

import pytest
import torch
from helpers import BAND_BACKENDS, backend_or_skip
from transformers.models.longformer.modeling_longformer import LongformerConfig
from transformers.models.longformer.modeling_longformer import LongformerSelfAttention as HFSelfAttention

from longformer_fs.attention import LongformerSelfAttention

W, B, C, H = 3, 3, 16, 4
T = 8 * W  # a multiple of HF's attention_window = 2W


def build_pair(backend):
    config = LongformerConfig(
        hidden_size=C, num_attention_heads=H, attention_window=[2 * W], attention_probs_dropout_prob=0.0
    )
    hf = HFSelfAttention(config, layer_id=0).double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():  # independent local and global projections
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.4)

    ours = LongformerSelfAttention(C, H, W, backend=backend).double()
    names = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}
    with torch.no_grad():
        for hf_name, our_name in names.items():
            for suffix in ("", "_global"):
                getattr(ours, our_name + suffix).load_state_dict(getattr(hf, hf_name + suffix).state_dict())
        # HF's self-attention stops before the output projection.
        ours.out_proj.weight.copy_(torch.eye(C, dtype=torch.float64))
        ours.out_proj.bias.zero_()
    return hf, ours


def masks():
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, T - 5 :] = True
    pad[2, T - 11 :] = True
    glob = torch.zeros(B, T, dtype=torch.bool)
    glob[0, [0, 7, T - 1]] = True
    glob[1, [2, 3]] = True
    glob[2, 0] = True
    return pad, glob


def hf_forward(hf, hidden, pad, glob):
    mask = torch.zeros(B, T, dtype=torch.float64)
    mask[glob] = 10000.0
    mask[pad] = -10000.0
    return hf(
        hidden,
        attention_mask=mask,
        is_index_masked=mask < 0,
        is_index_global_attn=mask > 0,
        is_global_attn=bool(glob.any()),
    )[0]


def run(model, hidden, pad, glob, weight, hf):
    hidden = hidden.clone().requires_grad_()
    if hf:
        out = hf_forward(model, hidden, pad, glob)
    else:
        out = model(hidden.transpose(0, 1), key_padding_mask=pad, global_mask=glob).transpose(0, 1)
    (out * weight).sum().backward()
    return out.detach(), hidden.grad


@pytest.mark.parametrize("backend", BAND_BACKENDS)
@pytest.mark.parametrize("with_globals", [True, False], ids=["global", "local-only"])
def test_matches_hf_longformer(backend, with_globals):
    backend = backend_or_skip(backend)
    hf, ours = build_pair(backend)
    pad, glob = masks()
    if not with_globals:
        glob = torch.zeros_like(glob)
    hidden = torch.randn(B, T, C, dtype=torch.float64)
    weight = torch.randn(B, T, C, dtype=torch.float64) * (~pad)[..., None]  # non-padded rows only
    keep = ~pad

    # Outputs in float64. (HF's float64 backward is NaN even without padding: its
    # additive finfo.min masks overflow to -inf. Gradients are compared in float32.)
    with torch.no_grad():
        out_hf = hf_forward(hf, hidden, pad, glob)
        out_ours = ours(hidden.transpose(0, 1), key_padding_mask=pad, global_mask=glob).transpose(0, 1)
    torch.testing.assert_close(out_ours[keep], out_hf[keep], atol=1e-5, rtol=0)

    hf, ours = hf.float(), ours.float()
    out_hf, grad_hf = run(hf, hidden.float(), pad, glob, weight.float(), hf=True)
    out_ours, grad_ours = run(ours, hidden.float(), pad, glob, weight.float(), hf=False)
    assert torch.isfinite(grad_hf).all()
    torch.testing.assert_close(grad_ours, grad_hf, atol=1e-4, rtol=1e-4)
    for hf_name, our_name in {"query": "q_proj", "key": "k_proj", "value": "v_proj"}.items():
        for suffix in ("", "_global"):
            g_hf = getattr(hf, hf_name + suffix).weight.grad
            g_ours = getattr(ours, our_name + suffix).weight.grad
            if not with_globals and suffix:
                assert g_ours is None or g_ours.abs().max() == 0
                continue
            assert g_hf.abs().max() > 0
            torch.testing.assert_close(g_ours, g_hf, atol=1e-4, rtol=1e-4, msg=hf_name + suffix)
