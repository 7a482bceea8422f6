"""The character-LM model: relative band attention, decoder, fairseq adapter."""

import pytest
import torch
from oracle import oracle_attention

from longformer_fs.attention.relative_layer import RelativeBandSelfAttention
from longformer_fs.modules.char_lm_decoder import DecoderShape, LongformerDecoder
from longformer_fs.modules.per_layer import layer_values


def randomize(module, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)


@pytest.mark.parametrize("window,dilation,causal", [(3, (1, 1, 2, 3), True), (2, 1, False), (40, (1, 2, 1, 1), True)])
def test_relative_attention_matches_dense_float64_reference(window, dilation, causal):
    layer = RelativeBandSelfAttention(16, 4, window, dilation, causal).double()
    randomize(layer)
    x = torch.randn(23, 2, 16, dtype=torch.float64)
    out = layer(x)

    # Independent: the oracle's row loop with the Transformer-XL terms spelled out.
    q, k, v = (t.transpose(0, 1).reshape(2, 23, 4, 4) for t in layer.qkv_proj(x).chunk(3, -1))
    expected = oracle_attention(
        q + layer.content_bias,
        k,
        v,
        window,
        layer.dilations,
        causal,
        pos_query=q + layer.position_bias,
        pos_table=layer.position_table(window),
    )
    expected = layer.out_proj(expected.reshape(2, 23, 16).transpose(0, 1))
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


def test_position_table_uses_each_heads_distances():
    """Head h's table row for column c is W_R applied to sinusoid(d_h * (w - c)), head h's slice."""
    from longformer_fs.attention.relative import sinusoid

    layer = RelativeBandSelfAttention(8, 2, 2, (1, 3), causal=True).double()
    randomize(layer)
    table = layer.position_table()
    assert table.shape == (2, 3, 4)
    for h, d in enumerate((1, 3)):
        for c in range(3):
            full = layer.pos_proj(sinusoid(torch.tensor(d * (2 - c)), 8).double())
            torch.testing.assert_close(table[h, c], full[h * 4 : (h + 1) * 4])


def small_decoder(checkpoint=False):
    shape = DecoderShape(
        vocab_size=11,
        padding_idx=1,
        embed_dim=16,
        ffn_dim=32,
        num_heads=4,
        windows=(2, 5),
        dilations=((1, 1, 1, 2), (1, 1, 2, 3)),
    )
    torch.manual_seed(0)
    return LongformerDecoder(shape, dropout=0.0, checkpoint_activations=checkpoint).double()


def test_decoder_is_causal():
    decoder = small_decoder()
    tokens = torch.randint(4, 11, (2, 30))
    logits, states = decoder(tokens)
    assert logits.shape == (2, 30, 11) and len(states) == 2
    changed = tokens.clone()
    changed[:, 20:] = 4 + (changed[:, 20:] - 3) % 7  # alter every token from 20 on
    logits2, _ = decoder(changed)
    torch.testing.assert_close(logits2[:, :20], logits[:, :20])
    assert not torch.allclose(logits2[:, 20:], logits[:, 20:])


def test_activation_checkpointing_gives_the_same_gradients():
    tokens = torch.randint(4, 11, (2, 25))
    grads = []
    for flag in (False, True):
        decoder = small_decoder(flag).train()
        decoder(tokens)[0].sum().backward()
        grads.append({n: p.grad.clone() for n, p in decoder.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)


def test_layer_values_syntax():
    assert layer_values("8", 3) == (8, 8, 8)
    assert layer_values(8, 3) == (8, 8, 8)  # Hydra reads `attention_window=8` as an int
    assert layer_values("1,2,3", 3) == (1, 2, 3)
    assert layer_values("32:8192", 12)[0] == 32 and layer_values("32:8192", 12)[-1] == 8192
    with pytest.raises(ValueError, match="attention windows"):
        layer_values("1,2", 3)
    with pytest.raises(ValueError, match="^attention windows: '0:8' needs 1 <= lo <= hi"):
        layer_values("0:8", 3)
    with pytest.raises(ValueError, match="^attention dilations:"):
        layer_values("1,2", 3, "attention dilations")


def test_relative_layer_rejects_bad_shapes():
    with pytest.raises(ValueError, match="^embed_dim:"):
        RelativeBandSelfAttention(10, 3, 2)
    with pytest.raises(ValueError, match="^dropout:"):
        RelativeBandSelfAttention(12, 3, 2, dropout=1.5)


def test_dilation_pattern():
    from longformer_fs.modules.per_layer import dilation_pattern

    assert dilation_pattern("1,2,4", 3, 4, 2) == ((1, 1, 1, 1), (1, 1, 2, 2), (1, 1, 4, 4))
    with pytest.raises(ValueError, match="dilated-heads"):
        dilation_pattern("1,2,4", 3, 4, 5)


# ---------------------------------------------------------------- the deprecated spellings


def _lm_shape(caplog=None, **settings):
    """The decoder shape `longformer_lm` builds from a config of ``settings``."""
    from fairseq.data import Dictionary

    from longformer_fs.models.longformer_lm import LongformerLanguageModel, LongformerLMConfig

    dictionary = Dictionary()
    cfg = LongformerLMConfig(decoder_layers=2, decoder_embed_dim=16, decoder_ffn_embed_dim=32,
                             decoder_attention_heads=4, **settings)  # fmt: skip
    task = type("Task", (), {"target_dictionary": dictionary})()
    return LongformerLanguageModel.build_model(cfg, task).decoder.net.shape


def test_the_old_spellings_build_the_same_model_and_say_which_to_use(caplog):
    new = _lm_shape(attention_window="4:16", attention_dilation="1,2")
    assert new.windows == (4, 16) and new.dilations == ((1, 1, 1, 1), (1, 1, 2, 2))
    with caplog.at_level("WARNING"):
        old = _lm_shape(attention_windows="4:16", attention_dilations="1,2")
    assert old == new
    assert "--attention-windows (model.attention_windows) is deprecated; use --attention-window" in caplog.text
    assert "--attention-dilations (model.attention_dilations) is deprecated; use --attention-dilation" in caplog.text
    # Both spellings agreeing is no conflict.
    assert _lm_shape(attention_window="4:16", attention_windows="4:16", attention_dilation="1,2") == new


def test_the_two_spellings_disagreeing_is_an_error():
    with pytest.raises(ValueError, match=r"^--attention-windows \(model.attention_windows\) is the deprecated .*"
                       r"'4:16' against '8:32'.*give only --attention-window"):  # fmt: skip
        _lm_shape(attention_window="8:32", attention_windows="4:16")
    with pytest.raises(ValueError, match="give only --attention-dilation"):
        _lm_shape(attention_dilation="1,3", attention_dilations="1,2")
