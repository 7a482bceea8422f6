"""The flex backend (PyTorch FlexAttention) against the float64 oracle, on CPU.

What runs on CPU with this torch: FlexAttention's eager reference path with the
backend's masks (forward, log-sum-exp, padding, dilation, causal, relative positions,
global tokens through the layer), and the compiled CPU kernel with the backend's block
mask (forward outputs; compiled CPU FlexAttention cannot return the log-sum-exp).
FlexAttention has no CPU backward: the backward, the compiled log-sum-exp and the
relative-position bias gradient are left for a GPU (`longformer-fs check` covers the
kernels there; FlexAttention's backward is PyTorch's). How often the backend compiles
over a training run's lengths, windows and padding is dynamo's business, the same on
every device, and is counted here on CPU.
"""

import itertools
import types
from collections import Counter

import pytest
import torch
from oracle import oracle_attention, oracle_layer
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.nn.attention.flex_attention import BlockMask
from torch.utils._python_dispatch import TorchDispatchMode

from longformer_fs.attention import LongformerSelfAttention, banded_attention
from longformer_fs.attention.backends.flex import (
    band_block_mask,
    band_forward,
    band_tiles,
    call_inputs,
    flex_band_attention,
    length_mode,
    work,
)
from longformer_fs.attention.band import band_mask, residue_order
from longformer_fs.attention.functional import band_attention_with_lse
from longformer_fs.attention.spec import BackendFailed, BandSpec, PositionTerm

CASES = [  # seq_len, window, dilations, causal, padded
    (37, 3, (1, 1), False, False),
    (45, 5, (1, 2, 3), True, True),
    (40, 50, (1, 1), False, True),  # window beyond T
    (33, 0, (2, 1), True, False),
]


def qkv(seq_len, heads, seed=0, dim=8):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, seq_len, heads, dim, generator=gen) for _ in range(3)]


def padding(seq_len, padded):
    if not padded:
        return None
    pad = torch.zeros(2, seq_len, dtype=torch.bool)
    pad[1, seq_len - 12 :] = True  # longer than the window: some rows see no key
    return pad


@pytest.mark.parametrize("seq_len,window,dilations,causal,padded", CASES)
def test_forward_matches_oracle(seq_len, window, dilations, causal, padded):
    q, k, v = qkv(seq_len, len(dilations))
    pad = padding(seq_len, padded)
    with torch.no_grad():
        got = banded_attention(q, k, v, window, dilations, causal, pad, backend="flex")
    want = oracle_attention(q.double(), k.double(), v.double(), window, dilations, causal, pad)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_lse_and_empty_rows_match_the_reference_backend():
    from longformer_fs.attention.backends.reference import reference_band_attention

    q, k, v = (x.transpose(1, 2) for x in qkv(45, 3))
    pad = padding(45, True)
    spec = BandSpec(5, (1, 2, 3), True, 8**-0.5)
    with torch.no_grad():
        out, lse = flex_band_attention(q, k, v, pad, spec)
    ref_out, ref_lse = reference_band_attention(q.double(), k.double(), v.double(), pad, spec)
    empty = torch.isinf(ref_lse)
    assert empty.any() and torch.isinf(lse[empty]).all() and (lse[empty] < 0).all()
    torch.testing.assert_close(lse[~empty].double(), ref_lse[~empty], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_relative_position_term_matches_oracle(causal):
    """Dilated and undilated heads in one call: in slot order a dilated head's band column
    is the slot distance, as an undilated head's is."""
    q, k, v = qkv(40, 2, seed=1)
    window, dilations = 6, (1, 3)
    gen = torch.Generator().manual_seed(2)
    pos_query = torch.randn(2, 40, 2, 8, generator=gen)
    table = torch.randn(2, window + 1 if causal else 2 * window + 1, 8, generator=gen)
    spec = BandSpec(window, dilations, causal, 8**-0.5, relative=True)
    with torch.no_grad():
        out, _ = flex_band_attention(
            *(x.transpose(1, 2) for x in (q, k, v)), None, spec, PositionTerm(pos_query.transpose(1, 2), table)
        )
    want = oracle_attention(
        q.double(),
        k.double(),
        v.double(),
        window,
        dilations,
        causal,
        pos_query=pos_query.double(),
        pos_table=table.double(),
    )
    torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)


def test_layer_with_global_tokens_matches_oracle():
    torch.manual_seed(0)
    layer = LongformerSelfAttention(24, 3, window=3, dilation=(1, 2, 1), backend="flex").eval()
    x = torch.randn(30, 2, 24)
    pad = padding(30, True)
    glob = torch.zeros(2, 30, dtype=torch.bool)
    glob[0, [0, 11]] = True
    glob[1, 2] = True
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x, pad, glob).double(), oracle_layer(layer.double(), x.double(), pad, glob), atol=1e-5, rtol=1e-5
        )


def test_every_tensor_the_mask_reads_is_32_bit():
    """On a GPU, a mask_mod that loads bytes (bool or uint8 padding) makes FlexAttention's
    forward 10x slower (measured on an H200, docs/benchmarks.md); 32-bit loads cost nothing.
    A call without padding reads no key tensor at all."""
    q = qkv(45, 3)[0].transpose(1, 2)
    for dilations, pad in itertools.product(((1, 1, 1), (1, 2, 3)), (None, padding(45, True))):
        mask_mod = band_block_mask(q, pad, BandSpec(5, dilations, False, 1.0)).mask_mod
        read = [c.cell_contents for c in mask_mod.__closure__ if isinstance(c.cell_contents, torch.Tensor)]
        # before, after (, residue classes) (, key padding)
        assert len(read) == 2 + (dilations != (1, 1, 1)) + (pad is not None), (dilations, pad is not None)
        assert all(t.element_size() >= 4 for t in read), [t.dtype for t in read]
        if pad is None:  # only per-head tensors (3 heads, a batch of 2): no key tensor
            assert all(t.shape[0] == 3 for t in read), [t.shape for t in read]


class CountOps(TorchDispatchMode):
    """Counts the aten operators run inside."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_block_masks_are_torchs_own_built_once_and_no_call_sorts(monkeypatch):
    """The index tensors, both sides, are what ``BlockMask.from_kv_blocks`` makes of the
    key-side lists (it transposes them with a sort): so FlexAttention's backward walks the
    same tiles. They are built at a geometry's first call; later calls, and each layer of
    a call, sort nothing (counted at aten's dispatch: everything the backend runs but
    FlexAttention's own kernel, which a stand-in replaces)."""
    from longformer_fs.attention.backends import flex

    for seq_len, dilations, causal, pad, static in (
        (301, (1, 1, 1, 1), False, None, False),  # three tiles, the last one reaching past T
        (301, (2, 1, 3, 1), True, None, False),
        (301, (1, 2, 1, 4), False, padding(301, True), False),
        (520, (1, 1, 2, 2), False, None, True),  # five tiles in a bucket of six: one of padding alone
    ):
        q = qkv(seq_len, 4)[0].transpose(1, 2)
        mine = band_block_mask(q, pad, BandSpec(150, dilations, causal, 1.0), static)
        torchs = BlockMask.from_kv_blocks(
            mine.kv_num_blocks,
            mine.kv_indices,
            mine.full_kv_num_blocks,
            mine.full_kv_indices,
            BLOCK_SIZE=mine.BLOCK_SIZE,
            mask_mod=mine.mask_mod,
            seq_lengths=mine.seq_lengths,
        )
        assert mine.seq_lengths == ((768, 768) if static else (384, 384)) and mine.BLOCK_SIZE == (128, 128)
        for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices") + (
            "q_num_blocks",
            "q_indices",
            "full_q_num_blocks",
            "full_q_indices",
        ):
            assert torch.equal(getattr(mine, name), getattr(torchs, name)), (dilations, name)
        if static:  # the tile of padding alone is visited from neither side
            assert all(getattr(mine, n)[..., -1].sum() == 0 for n in ("kv_num_blocks", "q_num_blocks"))
        if pad is not None or not causal:  # full tiles: none with padding, some in a wide bidirectional band
            assert (mine.full_kv_num_blocks.sum() > 0) == (pad is None)

    seen = []

    def stand_in(q, k, v, score_mod=None, block_mask=None, scale=None, return_aux=None):
        seen.append(block_mask)
        return q.clone(), types.SimpleNamespace(lse=q.float().logsumexp(-1))

    monkeypatch.setattr(flex, "flex_attention", stand_in)
    for cache in (flex.tile_lists, flex.slot_order, flex.slot_classes, flex.slot_positions):
        cache.cache_clear()
    q, k, v = (x.transpose(1, 2) for x in qkv(301, 3, dim=16))
    spec = BandSpec(20, (1, 2, 3), True, 0.25)
    for pad in (None, padding(301, True)):
        counts = []
        for _ in range(3):  # three layers of a call, or three calls
            with torch.no_grad(), CountOps() as mode:
                flex_band_attention(q, k, v, pad, spec)
            counts.append(sum(n for op, n in mode.ops.items() if "sort" in op))
        assert counts[0] > 0 and counts[1:] == [0, 0], counts  # sorted once, when the geometry was new
    assert seen[-1].full_q_indices is not None and seen[-1].q_indices.shape == (1, 3, 3, 3)


def test_compiled_cpu_flex_with_our_block_mask(monkeypatch):
    """The real compiled kernel visits only the tiles the block mask lists. Two calls of one
    kind (no key padding, dilated heads), compiled as the backend compiles, with dynamic
    shapes: a window wide enough for "full" tiles (mask skipped) inside a dilated head's
    residue class, whose classes of 151 and 150 slots meet inside a tile; then mixed
    dilations, causal and another length. No T is a multiple of 2, 3, 4 or 128: the
    kernel computes on 384 slots, and the last tile of keys holds padding that only the
    mask drops. (Key padding is another kind, another compilation: the eager tests above
    cover its mask.)

    Inductor's FlexAttention lowering, the same for every device up to the kernel it
    generates, is asked what its GPU path asks to drop bounds checks (``IS_DIVISIBLE``):
    whether the length is known to be a multiple of 128 though it is symbolic."""
    import sympy
    from torch._inductor.kernel.flex import flex_attention as lowering
    from torch._inductor.virtualized import V
    from torch.utils._sympy.functions import Mod

    divisible = []

    def lower_cpu(query, key, *args, **kwargs):
        for size in (query.get_size()[2], key.get_size()[2]):
            known = V.graph.sizevars.statically_known_true(sympy.Eq(Mod(size, 128), 0))
            divisible.append(known and not sympy.sympify(size).is_number)
        return real(query, key, *args, **kwargs)

    real = lowering.lower_cpu
    monkeypatch.setattr(lowering, "lower_cpu", lower_cpu)
    forward = torch.compile(band_forward, dynamic=True)
    torch._dynamo.reset()
    for seq_len, window, dilations, causal in ((301, 150, (2, 1, 1, 2), False), (333, 20, (1, 2, 3, 4), True)):
        q, k, v = (x.transpose(1, 2) for x in qkv(seq_len, 4, dim=16))
        spec = BandSpec(window, dilations, causal, 16**-0.5)
        if window == 150:  # head 0 has d = 2
            assert band_block_mask(q, None, spec).full_kv_num_blocks[0, 0].sum() > 0
        # Inductor's graph cache (on disk, across runs) would hand back a graph another run lowered.
        with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
            out = forward(q, k, v, *call_inputs(q, None, spec), spec.scale)
        want = oracle_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), window, dilations, causal)
        torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)
    assert divisible == [True, True]  # one compilation, for both lengths


@pytest.mark.parametrize(
    "window,dilation,causal,padded", list(itertools.product((0, 3, 9), (1, 2, 3), (False, True), (False, True)))
)
def test_block_lists_cover_the_band_and_full_tiles_hold_only_band(window, dilation, causal, padded):
    """Over T rounded up to the tile (40) and over a length bucket beyond (56): tiles past
    T are padding, never visited, and a tile whose keys reach past T is never full."""
    seq_len, block = 37, 8  # not a multiple of 2 or 3: residue classes of unequal length
    slots = residue_order(seq_len, dilation)
    mask = band_mask(seq_len, window, dilation, causal)[slots][:, slots]  # the band between slots
    for length in (None, 56):
        partial, full = band_tiles(seq_len, window, (dilation,), causal, padded, block, length)
        assert partial.shape[1] == (length or 40) // block
        for qb, kb in itertools.product(range(partial.shape[1]), repeat=2):
            tile = mask[qb * block : (qb + 1) * block, kb * block : (kb + 1) * block]
            if tile.any():
                assert partial[0, qb, kb] or full[0, qb, kb]
            else:
                assert not (partial[0, qb, kb] or full[0, qb, kb])  # no tile is visited for nothing
            if full[0, qb, kb]:
                assert tile.all() and not padded and (kb + 1) * block <= seq_len
            assert not (partial[0, qb, kb] and full[0, qb, kb])


@pytest.mark.parametrize("causal", [False, True])
def test_a_dilated_head_visits_as_many_tiles_as_an_undilated_one(causal):
    """The paper's top layers dilate by up to 4: in position order those heads would
    touch d times the tiles. In slot order they stay within a few tiles of d = 1."""
    seq_len, window = 4096, 256
    undilated = work(seq_len, BandSpec(window, (1,), causal, 1.0))
    for d in (2, 3, 4):
        assert work(seq_len, BandSpec(window, (d,), causal, 1.0)) <= 1.05 * undilated
    # The undilated count itself: each 128-row query tile meets 2w/128 + 1 (bidirectional)
    # or w/128 + 1 (causal) key tiles, fewer at the edges.
    tiles = undilated // 128**2
    assert tiles == (32 * 5 - 6 if not causal else 32 * 3 - 3), tiles


def test_reordering_into_slots_and_back_has_the_inverse_as_its_gradient():
    """The gathers around a dilated call: their gradients are gathers by the inverse order
    (no scatter-add), also as torch.compile traces them."""
    from longformer_fs.attention.backends.flex import reorder, slot_order

    order = slot_order(23, (1, 3, 2), "cpu")
    x = torch.randn(2, 3, 23, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: reorder(t, order), (x,))
    assert torch.autograd.gradcheck(lambda t: reorder(t, order, back=True), (x,))
    torch.testing.assert_close(reorder(reorder(x, order), order, back=True), x)
    weights = torch.randn(2, 3, 23, 4, dtype=torch.float64)

    def loss(t):
        return (reorder(t, order) * weights).sum()

    (eager,) = torch.autograd.grad(loss(x), x)
    torch._dynamo.reset()
    (compiled,) = torch.autograd.grad(torch.compile(loss, backend="aot_eager", fullgraph=True)(x), x)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(eager, reorder(weights, order, back=True))


def test_cpu_training_is_refused_clearly():
    q, k, v = (x.requires_grad_() for x in qkv(20, 2))
    with pytest.raises(ValueError, match="no backward on CPU"):
        banded_attention(q, k, v, 3, backend="flex")


# ------------------------------------------------------------ one compilation for a training run


class KernelLengths:
    """A compiler backend that counts what dynamo compiles (``frame_count``), records the
    length each compiled FlexAttention call computes on and the graph's sorts, then runs
    the graph as traced."""

    def __init__(self):
        self.frame_count = 0
        self.lengths = []
        self.sorts = []

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.higher_order.flex_attention:
                self.lengths.append(node.args[0].meta["example_value"].shape[2])
            if node.op in ("call_function", "call_method") and "sort" in str(node.target):
                self.sorts.append(node)
        return gm.forward


@pytest.fixture
def counted_compiles(monkeypatch):
    """Run the backend's compiled path on CPU under a compiler that counts what dynamo compiles.

    Dynamo (guards, recompiles, the recompile limit) is the same on every device; only
    the final kernels differ, and CPU FlexAttention runs forward-only here.
    """
    from longformer_fs.attention.backends import flex

    counter = KernelLengths()
    monkeypatch.setattr(flex, "_runner", lambda fn, device: flex.compiled(fn, counter))
    monkeypatch.setattr(flex, "_length_mode", "dynamic")  # whatever LONGFORMER_FS_FLEX_LENGTHS says
    torch._dynamo.reset()
    yield counter, flex
    torch._dynamo.reset()


def test_new_lengths_compile_a_bounded_number_of_times(counted_compiles, caplog):
    """What fairseq's batches bring: a new length every step, batch sizes that vary,
    padding in some batches, a different window per layer, layers with and without dilated
    heads, with and without the position term (25 steps meet all 8 kinds of call). The
    compilations stay bounded and nothing falls back to a dense path. (Lengths 130 to 394,
    2 to 4 tiles: what is counted is dynamo's work per new length, not the length; compiled
    with ``dynamic=False`` instead, it compiles 25 times and this fails, checked by hand.)

    And what FlexAttention computes on is a length that the compiler knows to be a
    multiple of 128, symbolically: its GPU kernels are then generated without bounds
    checks (inductor's lowering sets ``IS_DIVISIBLE`` on this very test) although one
    compilation serves every length."""
    counter, flex = counted_compiles
    lengths = [130 + 11 * i for i in range(25)]
    checked = {lengths[0], lengths[5], lengths[17], lengths[-1]}  # [5]: undilated, relative
    with torch.no_grad(), caplog.at_level("WARNING"):
        for i, seq_len in enumerate(lengths):
            batch, window = 1 + i % 3, (4, 16, 40)[i % 3]
            q, k, v = (x.transpose(1, 2) for x in qkv(seq_len, 2, seed=i, dim=16))
            pad = None
            if i % 2:
                pad = torch.zeros(batch, seq_len, dtype=torch.bool)
                pad[-1, seq_len - 30 :] = True
            q, k, v = (x[:1].expand(batch, -1, -1, -1).contiguous() for x in (q, k, v))
            dilations = (1, 2) if i % 7 < 4 else (1, 1)
            spec = BandSpec(window, dilations, i % 4 == 0, 16**-0.5, relative=i % 5 == 0)
            position = None
            if spec.relative:
                width = window + 1 if spec.causal else 2 * window + 1
                position = PositionTerm(torch.randn(q.shape), torch.randn(2, width, 16) * 0.3)
            out, lse = flex_band_attention(q, k, v, pad, spec, position)
            if seq_len in checked:
                from longformer_fs.attention.backends.reference import reference_band_attention

                want, want_lse = reference_band_attention(
                    *(x.double() for x in (q, k, v)),
                    pad,
                    spec,
                    None if position is None else PositionTerm(position.query.double(), position.table.double()),
                )
                rows = torch.ones(batch, seq_len, dtype=torch.bool) if pad is None else ~pad
                torch.testing.assert_close(
                    out.transpose(1, 2)[rows].double(), want.transpose(1, 2)[rows], atol=1e-5, rtol=1e-5
                )
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "flex" in r.getMessage()]
    # Eight functions (plain, relative; with and without dilated heads, key padding), each
    # specialised at most for a batch of one: far from one per length or window.
    assert 8 <= counter.frame_count <= 16, counter.frame_count
    assert len(counter.lengths) == counter.frame_count and counter.sorts == []  # the compiled code sorts nothing
    assert all(isinstance(n, torch.SymInt) and statically_known_true(n % 128 == 0) for n in counter.lengths)


def test_length_buckets_compile_once_each_and_run_static_lengths(counted_compiles):
    """The other way to give FlexAttention static shapes: each bucket of lengths compiled
    for its own constant length (``length_mode("buckets")``, which the GPU report times as
    ``flex-static``). Ten lengths of 2 to 4 tiles fall in 3 buckets: 3 compilations,
    each for a constant length, and more than torch's recompile limit allows (here 2):
    the mode raises it for its own compilations."""
    counter, flex = counted_compiles
    spec = BandSpec(8, (1, 1), False, 16**-0.5)
    lengths = [130 + 38 * i for i in range(10)]  # 130 to 472 tokens
    # config.patch, not monkeypatch: dynamo's config module loses a key that monkeypatch restores.
    with torch.no_grad(), length_mode("buckets"), torch._dynamo.config.patch(recompile_limit=2):
        for seq_len in lengths:
            q, k, v = (x.transpose(1, 2) for x in qkv(seq_len, 2, seed=seq_len, dim=16))
            out, _ = flex_band_attention(q, k, v, None, spec)
            if seq_len in (lengths[0], lengths[-1]):
                want = oracle_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), 8, (1, 1))
                torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)
    assert counter.lengths == [256, 384, 512] and counter.frame_count == 3
    assert flex.current_length_mode() == "dynamic"


def test_hitting_the_recompile_limit_raises_and_says_why(counted_compiles):
    """No dense path and no other backend behind the user's back: flex by name stops."""
    counter, flex = counted_compiles
    spec = BandSpec(5, (1, 1), False, 16**-0.5)
    # config.patch, not monkeypatch: dynamo's config module loses a key that monkeypatch restores.
    with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):
        for batch, dtype in ((2, torch.float32), (2, torch.float64)):
            q, k, v = (torch.randn(batch, 2, 150, 16, dtype=dtype) for _ in range(3))
            if dtype == torch.float32:
                out, _ = flex_band_attention(q, k, v, None, spec)
                want = oracle_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), 5, (1, 1))
                torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)
                continue
            with pytest.raises(BackendFailed, match=r"backend 'flex' failed on plain calls: .*recompile limit.*dense"):
                flex_band_attention(q, k, v, None, spec)


def _failing_compiles(monkeypatch, flex) -> list:
    """flex's compilations, made to fail; returns the list of the graphs it was asked for."""
    asked = []

    def failing_compiler(graph, example_inputs):
        asked.append(graph)
        raise RuntimeError("no kernel for this shape (test)")

    monkeypatch.setattr(flex, "_runner", lambda fn, device: flex.compiled(fn, failing_compiler))
    return asked


def test_a_failed_compilation_raises_for_flex_by_name(counted_compiles, monkeypatch):
    counter, flex = counted_compiles
    _failing_compiles(monkeypatch, flex)
    q, k, v = (torch.randn(2, 2, 150, 16) for _ in range(3))
    with torch.no_grad(), pytest.raises(BackendFailed, match=r"compiling FlexAttention failed: .*\(test\)"):
        band_attention_with_lse(q, k, v, None, BandSpec(5, (1, 2), True, 0.25), backend="flex")


def test_auto_records_a_failed_compilation_and_chooses_again(counted_compiles, monkeypatch, caplog):
    """auto took flex (first in its order here), flex failed to compile: auto says so,
    computes the call with the next backend, and does not ask flex again for that kind."""
    from longformer_fs.attention import backends

    counter, flex = counted_compiles
    asked = _failing_compiles(monkeypatch, flex)
    monkeypatch.setitem(backends.AUTO_ORDER, "cpu", ("flex", "chunks"))
    backends.forget_choices()
    spec = BandSpec(5, (1, 2), True, 0.25)
    try:
        with torch.no_grad(), caplog.at_level("WARNING"):
            for seed in range(2):
                torch.manual_seed(seed)
                q, k, v = (torch.randn(2, 2, 150, 16) for _ in range(3))
                out, _ = band_attention_with_lse(q, k, v, None, spec)
                want = oracle_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), 5, (1, 2), True)
                torch.testing.assert_close(out.transpose(1, 2).double(), want, atol=1e-5, rtol=1e-5)
        assert backends.get_backend("auto", spec, q).name == "chunks"
    finally:
        backends.forget_choices()
    said = [r.getMessage() for r in caplog.records if "auto: flex failed" in r.getMessage()]
    assert len(said) == 1 and "(test)" in said[0] and "chose chunks" in said[0]
    assert len(asked) == 1  # the second call went to chunks at once


def test_small_head_dimensions_on_gpu_go_elsewhere_with_a_reason():
    from longformer_fs.attention.backends import choose_backend
    from longformer_fs.attention.backends.flex import limits

    spec = BandSpec(16, (1,), False, 0.125)
    assert limits(spec, torch.device("cuda"), 8) != []
    assert limits(spec, torch.device("cuda"), 16) == []
    # float32: FlashAttention, first on CUDA, passes over it too (half precision only).
    backend, reason = choose_backend(spec, torch.device("cuda"), torch.float32, head_dim=8)
    assert backend.name == "chunks" and "head dimension of 16 or more (this call: 8)" in reason
