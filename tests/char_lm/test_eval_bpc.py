"""The overlapping-window BPC protocol scores every character exactly once."""

import math

import pytest
import torch

from longformer_fs.evaluation.sliding_window import sliding_window_bpc, window_plan


@pytest.mark.parametrize("n,window,step", [(1, 4, 2), (10, 4, 2), (37, 8, 3), (64, 16, 16), (5, 32, 8), (100, 10, 1)])
def test_plan_covers_each_character_once_with_enough_context(n, window, step):
    plan = window_plan(n, window, step)
    scored = [p for w in plan for p in range(w.scored_from, w.end)]
    assert scored == list(range(n))
    for i, w in enumerate(plan):
        assert 0 < w.length <= window and w.start <= w.scored_from
        if i > 0:
            assert w.end - w.scored_from <= step
            # target p has inputs [start, p]: at least window - step characters before it
            assert w.scored_from - w.start >= min(window - step, w.scored_from)


def test_bad_window_and_step():
    with pytest.raises(ValueError, match="window/step"):
        window_plan(10, 4, 5)


def direct_bits(model_log_probs, chars, start_symbol, window, step):
    """Each character on its own: the window the protocol assigns it, computed from the rule."""
    stream = torch.cat([chars.new_tensor([start_symbol]), chars])
    n, bits, runs = len(chars), 0.0, {}
    for p in range(n):
        k = 0 if p < window else math.ceil((p + 1 - window) / step)
        end = min(window + k * step, n)
        start = max(0, end - window)
        if (start, end) not in runs:  # characters that share a window share its run
            runs[start, end] = model_log_probs(stream[start:end][None])[0]
        lp = runs[start, end]
        bits -= float(lp[p - start, stream[p + 1]]) / math.log(2)
    return bits


@pytest.mark.parametrize("window,step,batch", [(16, 4, 3), (12, 12, 1), (40, 8, 8)])
def test_matches_direct_computation_on_a_tiny_model(window, step, batch):
    from longformer_fs.modules.char_lm_decoder import DecoderShape, LongformerDecoder

    torch.manual_seed(0)
    shape = DecoderShape(
        vocab_size=9, padding_idx=1, embed_dim=16, ffn_dim=32, num_heads=2, windows=(3, 6), dilations=((1, 2), (1, 1))
    )
    model = LongformerDecoder(shape, dropout=0.0).double().eval()

    def log_probs(inputs):
        with torch.no_grad():
            return torch.log_softmax(model(inputs)[0], dim=-1)

    chars = torch.randint(4, 9, (53,))
    result = sliding_window_bpc(log_probs, chars, 2, window, step, batch)
    assert result.scored == len(chars)
    assert result.bits == pytest.approx(direct_bits(log_probs, chars, 2, window, step), rel=1e-9)
    # Context matters here: scoring each character with a single short window differs.
    assert result.bits != pytest.approx(direct_bits(log_probs, chars, 2, 4, 4), rel=1e-6)
