"""The kernels as torch.library custom ops: opcheck, and torch.compile through them.

Before the ops were registered, dynamo broke the graph at every kernel call (a pybind
function inside an autograd.Function): 1 break for the layer, 2 with padding, 5 for a
2-layer character LM.
"""

import pytest
import torch
from oracle import oracle_layer

from longformer_fs.attention import LongformerSelfAttention, available_backends
from longformer_fs.attention.backends.kernel import band_backward, band_forward
from longformer_fs.modules.char_lm_decoder import DecoderShape, LongformerDecoder

pytestmark = pytest.mark.skipif("kernel" not in available_backends(), reason="cuda_ext extension not built")


def inputs(dtype, relative, padded, seed=0):
    gen = torch.Generator().manual_seed(seed)
    b, h, t, d, w = 2, 3, 37, 8, 4
    q, k, v = (torch.randn(b, h, t, d, generator=gen, dtype=dtype, requires_grad=True) for _ in range(3))
    key_ok = None
    if padded:
        key_ok = torch.ones(b, t, dtype=torch.bool)
        key_ok[1, 30:] = False
    pos_query = table = None
    if relative:
        pos_query = torch.randn(b, h, t, d, generator=gen, dtype=dtype, requires_grad=True)
        table = torch.randn(h, w + 1, d, generator=gen, dtype=dtype, requires_grad=True)
    return (q, k, v, key_ok, pos_query, table, [1, 2, 1], w, True, d**-0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("relative,padded", [(False, False), (False, True), (True, True)])
def test_opcheck(dtype, relative, padded):
    args = inputs(dtype, relative, padded)
    torch.library.opcheck(band_forward, args)
    out, lse = band_forward(*args)
    # The backward op has no gradient of its own (no double backward): detached inputs.
    tensors = [None if x is None else x.detach() for x in (*args[:6], out, lse)]
    grads = (torch.randn_like(out), torch.randn_like(lse))
    torch.library.opcheck(band_backward, (*tensors, *grads, *args[6:]))


def test_opcheck_catches_a_wrong_fake():
    """The check can fail: a fake implementation whose shape disagrees is reported."""

    @torch.library.custom_op("longformer_fs_test::wrong", mutates_args=())
    def wrong(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @wrong.register_fake
    def _(x):
        return x.new_empty(x.shape[0] + 1)

    with pytest.raises(Exception):  # noqa: B017  (opcheck raises OpCheckError)
        torch.library.opcheck(wrong, (torch.randn(3),))


# The whole model under torch.compile's default backend (inductor) is the layer test's; the
# others compile with aot_eager: dynamo and AOTAutograd trace the model, and our ops' fake
# and backward registrations, exactly as inductor receives them, without inductor's C++
# code generation (15 s a test on the cold cache CI starts with).
CHEAP_BACKEND = "aot_eager"


def graph_breaks(fn, *args, **kwargs) -> int:
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args, **kwargs).graph_break_count


def test_compiled_layer_has_no_graph_break_and_matches_eager():
    torch.manual_seed(0)
    layer = LongformerSelfAttention(24, 3, window=4, dilation=(1, 2, 3), backend="kernel").double()
    x = torch.randn(40, 2, 24, dtype=torch.float64)
    pad = torch.zeros(2, 40, dtype=torch.bool)
    pad[1, 33:] = True
    assert graph_breaks(layer, x) == 0
    assert graph_breaks(layer, x, key_padding_mask=pad) == 0

    def run(module):
        xi = x.clone().requires_grad_()
        layer.zero_grad()
        out = module(xi, key_padding_mask=pad)
        out.sum().backward()
        return [out, xi.grad] + [p.grad.clone() for p in layer.parameters() if p.grad is not None]

    torch._dynamo.reset()
    eager, compiled = run(layer), run(torch.compile(layer))
    assert len(eager) == len(compiled) > 5
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(eager[0], oracle_layer(layer, x, pad), atol=1e-10, rtol=1e-10)


def test_compiled_character_lm_has_no_graph_break_and_matches_eager():
    torch.manual_seed(0)
    shape = DecoderShape(20, 1, 32, 64, 4, (4, 8), ((1, 1, 2, 2), (1, 1, 2, 3)))
    model = LongformerDecoder(shape, dropout=0.0, backend="kernel").double()
    tokens = torch.randint(4, 20, (2, 48))
    assert graph_breaks(model, tokens) == 0

    def run(module):
        model.zero_grad()
        logits = module(tokens)[0]
        torch.nn.functional.cross_entropy(logits.view(-1, 20), tokens.view(-1)).backward()
        return [logits] + [p.grad.clone() for p in model.parameters()]

    torch._dynamo.reset()
    eager, compiled = run(model), run(torch.compile(model, backend=CHEAP_BACKEND))
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, atol=1e-9, rtol=1e-9)


def test_global_tokens_break_the_graph_only_at_their_count():
    """With global tokens the one data-dependent value is how many there are per row."""
    layer = LongformerSelfAttention(24, 3, window=4)
    x = torch.randn(40, 2, 24)
    glob = torch.zeros(2, 40, dtype=torch.bool)
    glob[:, [0, 17]] = True
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(layer)(x, global_mask=glob)
    frames = {frame.name for reason in explanation.break_reasons for frame in reason.user_stack[-1:]}
    assert frames == {"global_token_index"}, frames


def test_global_tokens_under_a_bound_compile_in_one_graph_and_match_eager():
    """Fine-tuning always has global tokens: with ``max_global`` the layer traces whole,
    and compiled outputs and gradients equal eager ones (and the float64 oracle)."""
    torch.manual_seed(0)
    layer = LongformerSelfAttention(24, 3, window=4, dilation=(1, 2, 1), backend="kernel", max_global=5).double()
    x = torch.randn(40, 2, 24, dtype=torch.float64)
    pad = torch.zeros(2, 40, dtype=torch.bool)
    pad[1, 31:] = True
    glob = torch.zeros(2, 40, dtype=torch.bool)
    glob[0, [0, 17, 18]] = True
    glob[1, 3] = True  # rows with different counts, both under the bound
    assert graph_breaks(layer, x, key_padding_mask=pad, global_mask=glob) == 0

    def run(module):
        xi = x.clone().requires_grad_()
        layer.zero_grad()
        out = module(xi, key_padding_mask=pad, global_mask=glob)
        out.sum().backward()
        return [out, xi.grad] + [p.grad.clone() for p in layer.parameters()]

    torch._dynamo.reset()
    eager, compiled = run(layer), run(torch.compile(layer, backend=CHEAP_BACKEND))
    assert len(eager) == len(compiled) == 2 + len(list(layer.parameters()))
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(eager[0], oracle_layer(layer, x, pad, glob), atol=1e-10, rtol=1e-10)
    # The bound is the same computation as the batch's own count.
    unbounded = LongformerSelfAttention(24, 3, window=4, dilation=(1, 2, 1), backend="kernel").double()
    unbounded.load_state_dict(layer.state_dict())
    torch.testing.assert_close(unbounded(x, pad, glob), eager[0], atol=1e-12, rtol=1e-12)


def test_a_row_over_the_global_bound_is_an_error():
    layer = LongformerSelfAttention(24, 3, window=4, max_global=2)
    glob = torch.zeros(1, 30, dtype=torch.bool)
    glob[0, [1, 2, 3]] = True
    with pytest.raises(RuntimeError, match="more global tokens than max_global"):
        layer(torch.randn(30, 1, 24), global_mask=glob)
    with pytest.raises(ValueError, match="max_global: expected a positive int"):
        LongformerSelfAttention(24, 3, window=4, max_global=0)


def test_constant_when_traced_marks_as_torch_compilers_decorator_does():
    """attention/tracing.py spares the import of torch._dynamo at start: its mark must be the
    one torch.compiler.assume_constant_result sets (the compiled tests above rely on it)."""
    from longformer_fs.attention.tracing import constant_when_traced

    def ours():
        return 1

    def theirs():
        return 1

    torch.compiler.assume_constant_result(theirs)
    constant_when_traced(ours)
    marks = {k: v for k, v in vars(theirs).items() if not k.startswith("__")}
    assert marks and marks == {k: v for k, v in vars(ours).items() if not k.startswith("__")}


def test_importing_the_attention_does_not_import_the_compiler():
    import subprocess  # a new interpreter: what importing the attention loads
    import sys

    code = "import sys, longformer_fs.attention; print('torch._dynamo' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.strip() == "False", result.stderr
