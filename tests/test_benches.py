"""The end-to-end benches measure what users run: the recipe's training settings, what each
step ran (attention backends, SDPA kernels, syncs, compiles), the bytes each layer saves,
and the causal-SDPA peer of ``bench lm``. Speed is never asserted: figures are checked
against what the test itself did or computed."""

from collections import Counter

import pytest
import torch
import yaml
from torch.nn.attention import SDPBackend

from longformer_fs.attention import LongformerSelfAttention
from longformer_fs.benchmarks import finetune as bench_finetune
from longformer_fs.benchmarks import led as bench_led
from longformer_fs.benchmarks import lm as bench_lm
from longformer_fs.benchmarks import recipe_training as recipe_training_module
from longformer_fs.benchmarks import step_profile
from longformer_fs.benchmarks.recipe_training import recipe_training, training_of, warmup_steps
from longformer_fs.cli import build_parser
from longformer_fs.report.recipe_runs import attention_backends

# What each SDPA backend torch says it picks (torch._fused_sdp_choice) is recorded as, on a CPU.
CPU_SDPA = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash (CPU)"}


def _model_settings(path):
    """The recipe's model section as its YAML says, with its ``model: NAME`` preset under it."""
    recipe = yaml.safe_load(path.read_text())
    model = {}
    for entry in recipe.get("defaults") or []:
        if isinstance(entry, dict) and "model" in entry:
            model.update(yaml.safe_load((path.parent / "model" / f"{entry['model']}.yaml").read_text()))
    return {**model, **(recipe.get("model") or {})}, recipe["common"]


@pytest.mark.parametrize(
    "bench, recipe",
    [("led", bench_led.RECIPE), ("lm", bench_lm.recipe(1)), ("finetune", bench_finetune.RECIPE)],
)
def test_each_bench_trains_as_its_recipe_unless_a_flag_says_otherwise(bench, recipe):
    model, common = _model_settings(recipe)
    args = build_parser().parse_args(["bench", bench, "--device", "cpu"])
    training = training_of(args, recipe)
    assert (training.dropout, training.attention_dropout) == (model["dropout"], model["attention_dropout"])
    assert training.checkpoint_activations == bool(model.get("checkpoint_activations", False))
    assert training.recipe_precision == ("fp16" if common.get("fp16") else "fp32")
    assert training.precision == "fp32" and not training.overridden  # no CUDA here: float32, as the recipes

    flags = ["--dropout", "0.3", "--attention-dropout", "0", "--checkpoint-activations", "--fp32"]
    training = training_of(build_parser().parse_args(["bench", bench, "--device", "cpu", *flags]), recipe)
    assert (training.dropout, training.attention_dropout, training.checkpoint_activations) == (0.3, 0.0, True)
    assert set(training.overridden) == {"dropout", "attention_dropout", "checkpoint_activations", "precision"}
    assert "from flags" in training.describe()


@pytest.mark.parametrize(
    "bench, recipe",
    [("led", bench_led.RECIPE), ("lm", bench_lm.recipe(1)), ("finetune", bench_finetune.RECIPE)],
)
def test_our_layers_compile_on_cuda_by_default_and_a_flag_overrides_it(bench, recipe, monkeypatch):
    def training(*flags, device="cpu"):
        return training_of(build_parser().parse_args(["bench", bench, "--device", device, *flags]), recipe)

    # A CPU: eager (inductor there takes minutes a graph), and not an override.
    assert not training().compile_layers and "compile_layers" not in training().overridden
    assert "eager layers" in training().describe()
    for flags, compiled in ((["--compile-layers"], True), (["--no-compile-layers"], False)):
        given = training(*flags)
        assert given.compile_layers is compiled and "compile_layers" in given.overridden
        assert given.figures()["compile_layers"] is compiled and "compile_layers" in given.figures()["overridden"]
    assert "compiled layers" in training("--compile-layers").describe()
    # CUDA (its device check stubbed: none here): compiled unless a flag says otherwise.
    monkeypatch.setattr(recipe_training_module, "check_device", lambda device, precision: None)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert training(device="cuda").compile_layers and "compile_layers" not in training(device="cuda").overridden
    assert not training("--no-compile-layers", device="cuda").compile_layers
    # At least two warm-up steps on CUDA with compiled layers (a shape compiles twice), else as asked.
    assert warmup_steps("cuda", True, 1) == 2 and warmup_steps("cuda", True, 3) == 3
    assert warmup_steps("cuda", False, 1) == 1 and warmup_steps("cpu", True, 0) == 0


def _compiled(model) -> list[str]:
    """The modules of ``model`` set to compile in training."""
    return [name for name, module in model.named_modules() if getattr(module, "compile_layers", False)]


def test_the_benches_compile_our_layers_and_never_the_peers(monkeypatch):
    """With ``compile_layers`` every layer of our models is set to compile (which happens in
    training, through modules.compiled: not run here), none of the peers'; the step gets the
    model so built. The steps' measurement is stubbed: nothing is compiled or timed."""
    # Building with compile_layers raises dynamo's recompile limit for the model's layers: restored after.
    with torch._dynamo.config.patch(recompile_limit=torch._dynamo.config.recompile_limit):
        led = bench_led.build("led", 64, 8, 8, 2, 32, compile_layers=True)
        layers = [*led.encoder.layers, *led.decoder.layers]
        assert len(layers) == 4 and all(layer.compile_layers is True for layer in layers)
        assert not _compiled(bench_led.build("bart", 64, 8, 8, 2, 32, compile_layers=True))
        assert not _compiled(bench_led.build("led", 64, 8, 8, 2, 32))

        ours = bench_finetune.build_ours(8, 2, 64, compile_layers=True)
        layers = ours.encoder.sentence_encoder.layers
        assert len(layers) == 2 and all(layer.compile_layers is True for layer in layers)

        lm, _ = bench_lm.longformer_small(1, False, layers=2, compile_layers=True)
        assert len(lm.blocks) == 2 and all(block.compile_layers is True for block in lm.blocks)
        sizes = bench_lm.peer_sizes(lm, 1)
        for name in bench_lm.PEERS:
            assert not _compiled(bench_lm.peer(name, 32, sizes, 0.0, 0.0, False))

        steps = []

        def measured(step, model, device, repeat, warmup, saved_tensors=False):
            steps.append((model, warmup))
            return {"step_s": 1.0, "peak_gib": 0.0, "attention": {}, "profile": {}}

        monkeypatch.setattr(bench_led, "measure_step", measured)
        monkeypatch.setattr(bench_finetune, "measure_step", measured)
        sizes = dict(source_len=64, target_len=8, window=8, layers=1, width=32, repeat=1, compile_layers=True)
        bench_led.step_measurement("led", **sizes)
        bench_led.step_measurement("bart", **sizes)
        assert _compiled(steps[0][0]) and not _compiled(steps[1][0])
        for kind in bench_finetune.KINDS:
            bench_finetune.step_measurement(kind, 64, 4, 8, 1, 1, "cpu", "fp32", 1, compile_layers=True)
        assert _compiled(steps[2][0]) and not _compiled(steps[3][0])
        assert [warmup for _, warmup in steps] == [0, 0, 1, 1]  # a CPU: as eager (no compile on CUDA to wait for)


def test_the_bench_flags_refuse_bad_input_in_one_line(tmp_path):
    from helpers import cli

    for args, message in (
        (["--dropout", "1.5"], "--dropout: expected a probability in [0, 1), got 1.5"),
        (["--attention-dropout", "-0.1"], "--attention-dropout: expected a probability"),
        (["--fp16"], "--fp16 needs --device cuda"),
    ):
        result = cli("bench", "led", "--device", "cpu", "--out", str(tmp_path), *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result
    # Without the recipe, the flags alone are enough; one missing is a one-line error.
    every = dict(precision="fp32", dropout=0.1, attention_dropout=0.0, checkpoint_activations=False)
    assert recipe_training(tmp_path / "absent.yaml", "cpu", **every).dropout == 0.1
    with pytest.raises(FileNotFoundError, match="give --dropout"):
        recipe_training(tmp_path / "absent.yaml", "cpu", dropout=0.1)
    help_text = cli("bench", "led", "--help").stdout
    assert "recipes/summarization/led_base_16k.yaml" in help_text and "--no-checkpoint-activations" in help_text


def _attention_step(layer, x, q):
    """A step with one band-attention call of ``layer``, an SDPA call with and one without
    dropout, two reads of a value and three cumsums."""

    def step():
        out = layer(x)
        dropped = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        plain = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        counts = sum(torch.ones(7).cumsum(0) for _ in range(3))  # no gradient: no cumsum in the backward
        if float(out.detach().sum()) > 1e30 or int((plain.detach() > 1e30).sum()) > 0:
            out = out * 0
        (out.sum() + dropped.sum() + plain.sum() + counts.sum()).backward()

    return step


def test_an_instrumented_step_names_what_it_ran():
    torch.manual_seed(0)
    layer = LongformerSelfAttention(32, 4, 3, dropout=0.1, backend="chunks").train()
    x = torch.randn(20, 1, 32, requires_grad=True)
    q = torch.randn(1, 2, 24, 16, requires_grad=True)
    record = step_profile.instrumented_step(_attention_step(layer, x, q), "cpu", top=200)

    attention = record["attention"]
    assert attention["backends"] == {"chunks (plain + dropout)": 1}  # the layer's one call
    expected = [CPU_SDPA[SDPBackend(torch._fused_sdp_choice(q, q, q, dropout_p=p))] for p in (0.5, 0.0)]
    assert attention["sdpa"] == dict(Counter(expected))
    profile = record["profile"]
    ops = {row["name"]: row for row in profile["kernels"]}
    assert ops["aten::cumsum"]["count"] == 3 and all(row["ms"] >= 0 for row in profile["kernels"])
    syncs = profile["host_syncs"]
    assert syncs["count"] == 2 and syncs["sites"][0]["site"].endswith("): step")  # float(), int() above
    assert syncs["sites"][0]["count"] == 2 and profile["h2d_copies"]["count"] == 0
    assert profile["dynamo"]["in_step"]["compiles"] == 0
    # The peak holds at least the scores of the SDPA calls (B, H, 24, 24) kept for the backward.
    assert record["peak_bytes"] >= 2 * 24 * 24 * 4


def test_dynamo_compiles_counts_recompiles_and_graph_breaks():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def scaled(x):
        return (x * 2).sin()

    def broken(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 3

    scaled_c = torch.compile(scaled, backend=counter, dynamic=False)
    broken_c = torch.compile(broken, backend="eager", dynamic=False)
    scaled_c(torch.ones(3))  # the first compile, before the measured region
    frames = counter.frame_count
    with step_profile.dynamo_compiles() as compiled:
        scaled_c(torch.ones(3))  # cached: nothing
        scaled_c(torch.ones(5))  # a new static shape: a recompile
        broken_c(torch.ones(2))  # a first compile, with one graph break
    assert compiled["recompiles"] == 1 and compiled["compiles"] >= 2
    assert counter.frame_count - frames == 1
    assert compiled["graph_breaks"] >= 1 and compiled["graph_break_reasons"]
    assert compiled["recompile_reasons"] and "3" in compiled["recompile_reasons"][0]


class _Saves(torch.autograd.Function):
    """Passes ``x`` through and saves a fresh tensor of ``n`` float32s for the backward."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.save_for_backward(torch.zeros(n))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Layer(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return _Saves.apply(x, self.n) * self.scale  # the product saves x (here) and the parameter (not counted)


def test_saved_tensor_bytes_are_attributed_to_the_layer_that_saved_them():
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([_Layer(1000), _Layer(3000)])
    model.head = torch.nn.Linear(8, 1)
    x = torch.randn(4, 8, requires_grad=True)

    def step():
        h = x
        for layer in model.layers:
            h = layer(h)
        model.head(h).sum().backward()

    saved = step_profile.saved_tensor_bytes(step, model)
    clone = 4 * 8 * 4  # the clone each layer multiplies by its parameter, saved by the product
    assert saved["layers"] == [
        {"layer": "layers.0", "bytes": 1000 * 4 + clone},
        {"layer": "layers.1", "bytes": 3000 * 4 + clone},
    ]
    assert saved["other_bytes"] == 4 * 8 * 4  # the head's input: the last layer's output
    assert saved["total_bytes"] == sum(r["bytes"] for r in saved["layers"]) + saved["other_bytes"]


def test_the_causal_sdpa_peer_computes_transformer_lm_without_its_mask():
    sizes = {"decoder_layers": 2, "decoder_embed_dim": 32, "decoder_ffn_embed_dim": 64, "decoder_attention_heads": 4}
    torch.manual_seed(0)
    fairseqs = bench_lm.transformer_lm(40, sizes).eval()
    peer = bench_lm.transformer_lm(40, sizes).eval()
    peer.load_state_dict(fairseqs.state_dict())
    bench_lm.causal_sdpa(peer)
    tokens = torch.randint(4, bench_lm.VOCAB, (2, 40))
    torch.testing.assert_close(peer(tokens)[0], fairseqs(tokens)[0], atol=1e-5, rtol=1e-5)
    assert fairseqs.decoder._future_mask.numel() == 40 * 40 and peer.decoder._future_mask.numel() == 0
    # Its calls are causal SDPA with the attention dropout: the kernel torch picks for exactly that.
    peer = bench_lm.peer("transformer_lm_causal_sdpa", 40, sizes, 0.1, 0.1, False)
    result = bench_lm.measure(peer, 40, 1)
    q = torch.randn(1, 4, 40, 8)
    expected = CPU_SDPA[SDPBackend(torch._fused_sdp_choice(q, q, q, dropout_p=0.1, is_causal=True))]
    assert result["attention"]["sdpa"] == {expected: 2} and result["chars_per_s"] > 0


def test_the_led_step_trains_with_the_settings_it_is_given():
    """LED and BART with the recipe's dropouts and checkpointing: LED's band calls drop
    probabilities, BART's SDPA calls are the kernel torch picks with dropout, and
    checkpointed layers keep less for the backward than the same layers unchekpointed."""
    sizes = dict(source_len=96, target_len=8, window=8, layers=1, width=32, repeat=1)
    led = bench_led.step_measurement("led", **sizes, checkpoint_activations=True, dropout=0.1, attention_dropout=0.1,
                                     saved_tensors=True)  # fmt: skip
    assert led["attention"]["backends"] and all("+ dropout" in kind for kind in led["attention"]["backends"])
    # With checkpointing the encoder's layer runs twice: in the forward and again in the backward.
    assert sum(led["attention"]["backends"].values()) == 2
    bart = bench_led.step_measurement("bart", **sizes, dropout=0.1, attention_dropout=0.1, saved_tensors=True)
    q = torch.randn(1, 1, 96, 32)
    assert set(bart["attention"]["sdpa"]) == {CPU_SDPA[SDPBackend(torch._fused_sdp_choice(q, q, q, dropout_p=0.1))]}
    assert not bart["attention"]["backends"]
    plain = bench_led.step_measurement("led", **sizes, dropout=0.1, attention_dropout=0.1, saved_tensors=True)
    checkpointed = {row["layer"]: row["bytes"] for row in led["saved_tensors"]["layers"]}
    whole = {row["layer"]: row["bytes"] for row in plain["saved_tensors"]["layers"]}
    assert set(checkpointed) == set(whole) == {"encoder.layers.0", "decoder.layers.0"}
    assert all(0 < checkpointed[name] < whole[name] for name in whole)


def test_a_step_in_half_precision_runs_the_model_in_it():
    """As fairseq's --bf16 trains: the model cast (on a CPU here, for the path only)."""
    ours, _ = bench_lm.longformer_small(1, False, layers=1, dropout=0.2)
    result = bench_lm.measure(ours, 48, 1, "cpu", "bf16")
    assert "error" not in result and next(ours.parameters()).dtype == torch.bfloat16
    assert result["attention"]["backends"] and all("relative" in kind for kind in result["attention"]["backends"])


def test_the_recipe_runs_say_whether_their_backends_are_fast_on_a_gpu():
    log = (
        "[INFO] - attention backend auto -> flash on cuda: FlashAttention-2's window\n"
        "[INFO] - attention backend auto -> flex on cuda: PyTorch-maintained FlexAttention\n"
    )
    found = attention_backends(log, "cuda")
    assert found["attention_backends"] == ["flash on cuda", "flex on cuda"] and found["fast_backend"] is True
    slow = log + "WARNING - attention backend flex -> chunks for relative calls: too long\n"
    found = attention_backends(slow, "cuda")
    assert found["attention_handed_over"] == ["flex -> chunks for relative calls"] and found["fast_backend"] is False
    assert attention_backends(log.replace("flash", "chunks"), "cuda")["fast_backend"] is False
    assert attention_backends("attention backend auto -> kernel on cpu: x", "cpu")["fast_backend"] is None
    assert attention_backends("no choice logged", "cuda") == {
        "attention_backends": [],
        "attention_handed_over": [],
        "fast_backend": None,
    }


class _Record:
    """A kineto record as the profiler gives them, for a trace written by hand."""

    def __init__(self, name, start, end, thread=1, device=False, correlation=0, linked=0, python=False):
        self._name, self._start, self._end, self._thread = name, start * 1000, end * 1000, thread
        self._device, self._correlation, self._linked, self._python = device, correlation, linked, python

    def name(self):
        return self._name

    def device_type(self):
        return torch._C._autograd.DeviceType.CUDA if self._device else torch._C._autograd.DeviceType.CPU

    def duration_ns(self):
        return self._end - self._start

    def start_ns(self):
        return self._start

    def end_ns(self):
        return self._end

    def start_thread_id(self):
        return self._thread

    end_thread_id = start_thread_id

    def is_async(self):
        return False

    def correlation_id(self):
        return self._correlation

    def linked_correlation_id(self):
        return self._linked

    def is_python_function(self):
        return self._python


def test_a_gpu_steps_events_give_its_kernels_syncs_and_copies():
    """The CUDA side of a profile, from a trace of one step written here (times in µs): a
    flash SDPA call, a host-to-device copy, an ``.item()`` in the forward and one in the
    backward (the autograd engine's thread on a GPU), and events outside the step."""
    step = step_profile._STEP
    records = [
        _Record(step, 0, 1000),
        _Record("tests/x.py(10): step", 10, 900, python=True),
        _Record("aten::scaled_dot_product_attention", 20, 100),
        _Record("aten::_scaled_dot_product_flash_attention", 30, 90, correlation=7),
        _Record("cudaLaunchKernel", 40, 50, correlation=501, linked=7),
        _Record("aten::copy_", 110, 190, correlation=8),
        _Record("cudaMemcpyAsync", 120, 130, correlation=502, linked=8),
        _Record("longformer_fs/models/led.py(3): forward", 200, 400, python=True),
        _Record("aten::item", 210, 300),
        _Record("aten::_local_scalar_dense", 220, 290, correlation=9),
        _Record("cudaMemcpyAsync", 230, 240, correlation=503, linked=9),
        _Record("cudaStreamSynchronize", 240, 280, correlation=504, linked=9),
        _Record("aten::_scaled_dot_product_flash_attention_backward", 500, 600, thread=2, correlation=10),
        _Record("aten::_local_scalar_dense", 610, 620, thread=2, correlation=11),
        _Record("aten::_local_scalar_dense", 1100, 1200),  # after the step
        _Record("cudaDeviceSynchronize", 1000, 1050, correlation=505),
        _Record(step, 0, 1000, device=True),  # the annotation's span on the GPU
        _Record("flash_fwd_kernel", 50, 80, device=True, linked=7),
        _Record("Memcpy HtoD (Pageable -> Device)", 130, 140, device=True, linked=8),
        _Record("Memcpy DtoH (Device -> Pageable)", 245, 250, device=True, linked=9),
        _Record("flash_bwd_kernel", 520, 560, device=True, linked=10),
        _Record("flash_bwd_kernel", 560, 590, device=True, linked=10),
    ]
    found = step_profile.step_events(step_profile.StepEvents(records), cuda=True)
    assert found["sdpa"] == {"flash": 1} and found["softmax_calls"] == 0
    assert [(k["name"], k["count"]) for k in found["kernels"][:2]] == [("flash_bwd_kernel", 2), ("flash_fwd_kernel", 1)]
    assert found["kernels"][0]["ms"] == pytest.approx(0.070) and step not in {k["name"] for k in found["kernels"]}
    syncs = found["host_syncs"]
    assert syncs["count"] == 2 and syncs["runtime_calls"] == {"cudaStreamSynchronize": 1}
    assert {s["site"]: s["count"] for s in syncs["sites"]} == {"longformer_fs/models/led.py(3): forward": 1, "?": 1}
    assert syncs["device_to_host_copies"] == 1
    assert found["h2d_copies"]["count"] == 1 and found["h2d_copies"]["sites"] == [
        {"site": "tests/x.py(10): step", "count": 1}
    ]
    # On a CPU the same records rank ops by self time: the SDPA op less its flash child.
    on_cpu = {k["name"]: k for k in step_profile.step_events(step_profile.StepEvents(records), cuda=False)["kernels"]}
    assert on_cpu["aten::scaled_dot_product_attention"]["ms"] == pytest.approx(0.080 - 0.060)
    assert on_cpu["aten::_scaled_dot_product_flash_attention"]["ms"] == pytest.approx(0.060 - 0.010)
