"""``longformer-fs bench lm``: training throughput of the character LM vs full attention.

``longformer_lm_small`` (12 layers, width 512, 8 heads, the recipe's windows and
dilation for the chosen phase) against two peers of the same width and depth with full
causal attention, both pre-layernorm GeLU, one sequence per step, forward+backward, side
by side in one process:

- fairseq's ``transformer_lm`` as fairseq runs it: its self-attention gets a float
  ``(T, T)`` causal mask, so PyTorch's SDPA cannot take its flash kernel;
- the same model with each self-attention one ``scaled_dot_product_attention(...,
  is_causal=True)`` call and no mask (:func:`causal_sdpa`): flash on a GPU in half
  precision, an honest upper peer.

Every model trains as ``recipes/char_lm/small_phaseN.yaml`` (N: ``--phase``) does unless
flags say otherwise: its dropout and attention dropout, precision (the recipes train the
character LM in float32) and activation checkpointing; ``longformer_lm_small``'s layers run
``torch.compile``d on CUDA (``--compile-layers``; eager elsewhere), the peers' as fairseq
runs them. A last row runs one training step of the small model at the phase-5 shape
(23,040 characters) with activation checkpointing.
Each result names the backend of every band-attention call and the kernel of every SDPA
call of its step.
"""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture
from tqdm import tqdm

from .. import devices
from ..conventions import PAD, byte_symbol
from ..modules.char_lm_decoder import DecoderShape, LongformerDecoder
from ..modules.per_layer import dilation_pattern, layer_values
from ..recipes import char_lm_dir, phase_settings
from . import int_list as _int_list
from . import write_results
from .measure import add_device_arguments, cast_as_fairseq, run_isolated
from .recipe_training import add_training_arguments, training_of
from .step_profile import add_saved_tensors_argument, attention_summary, measure_step

VOCAB = 205  # enwik8's byte vocabulary plus fairseq's specials


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-lens", type=_int_list, default=[2048, 4096, 8192], help="characters per sequence")
    parser.add_argument(
        "--phase",
        type=int,
        default=1,
        choices=range(1, 6),
        help="take windows and dilations from this phase of recipes/char_lm/small_phaseN",
    )
    parser.add_argument("--repeat", type=int, default=2, help="timed steps per measurement (median)")
    parser.add_argument("--phase5-len", type=int, default=23040, help="length of the checkpointed step (0: skip)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_arguments(parser, precision=False)
    add_training_arguments(parser, "recipes/char_lm/small_phaseN.yaml (N: --phase)")
    add_saved_tensors_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("bench_out/lm"), help="directory for results.json")


def recipe(phase: int) -> Path:
    """The recipe whose training ``bench lm`` copies: ``recipes/char_lm/small_phase{phase}.yaml``."""
    return char_lm_dir() / f"small_phase{phase}.yaml"


def longformer_small(
    phase: int, checkpoint: bool, layers: int | None = None, dropout: float = 0.0, attention_dropout: float = 0.0,
    compile_layers: bool = False,
) -> tuple[LongformerDecoder, str]:  # fmt: skip
    """``longformer_lm_small`` with the windows and dilations of recipe phase ``phase``; with
    ``layers`` (the report's ``--toy``), that many of its layers, spread from the first to
    the last, each with its own window and dilations; with ``compile_layers``, its layers
    compile in training. Returns it in train mode, and its windows as ``"lo:hi"``."""
    recipe = phase_settings("small", phase)
    m = recipe.model
    depth, heads = m["decoder_layers"], m["decoder_attention_heads"]
    windows = layer_values(recipe.attention_window, depth)
    dilations = dilation_pattern(m["attention_dilation"], depth, heads, m["dilated_heads"])
    if layers is not None:
        kept = [round(i * (depth - 1) / max(1, layers - 1)) for i in range(layers)]
        windows, dilations = [windows[i] for i in kept], [dilations[i] for i in kept]
    shape = DecoderShape(VOCAB, PAD, m["decoder_embed_dim"], m["decoder_ffn_embed_dim"], heads, windows, dilations)
    model = LongformerDecoder(
        shape, dropout=dropout, attention_dropout=attention_dropout, checkpoint_activations=checkpoint,
        compile_layers=compile_layers,
    ).train()  # fmt: skip
    return model, recipe.attention_window


def peer_sizes(ours: LongformerDecoder, phase: int) -> dict:
    """The size preset's model settings, as deep as ``ours``: what its transformer_lm peer is built with."""
    return {**phase_settings("small", phase).model, "decoder_layers": len(ours.blocks)}


def transformer_lm(
    seq_len: int, model: dict, dropout: float = 0.0, attention_dropout: float = 0.0,
    checkpoint_activations: bool = False,
):  # fmt: skip
    """fairseq's ``transformer_lm`` as wide and deep as a char-LM size preset, full attention."""
    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(byte_symbol(i))
    sizes = {
        key: model[key]
        for key in ("decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads")
    }
    args = argparse.Namespace(
        **sizes,
        dropout=dropout,
        attention_dropout=attention_dropout,
        checkpoint_activations=checkpoint_activations,
        activation_fn="gelu",
        decoder_normalize_before=True,
        tokens_per_sample=seq_len,
        max_target_positions=seq_len,
        share_decoder_input_output_embed=True,
    )
    base_lm_architecture(args)
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return TransformerLanguageModel.build_model(args, task).train()


def _causal_sdpa_forward(
    self, query: torch.Tensor, key=None, value=None, key_padding_mask=None, incremental_state=None,
    need_weights: bool = False, static_kv: bool = False, attn_mask=None, before_softmax: bool = False,
    need_head_weights: bool = False,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """fairseq ``MultiheadAttention``'s self-attention over ``query`` ``(T, B, C)`` as one
    causal SDPA call: the same projections, scale (``D ** -0.5``) and attention dropout, no
    mask tensor. Training only: no incremental state, no padding, no weights returned."""
    if incremental_state is not None or key_padding_mask is not None or need_weights or need_head_weights:
        raise ValueError("the causal-SDPA peer trains on unpadded sequences only (no decoding, no weights)")
    seq_len, batch, channels = query.shape

    def heads(x: torch.Tensor) -> torch.Tensor:  # (T, B, C) -> (B, H, T, D)
        return x.view(seq_len, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    q, k, v = heads(self.q_proj(query)), heads(self.k_proj(query)), heads(self.v_proj(query))
    dropout = self.dropout_module.p if self.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
    return self.out_proj(out.permute(2, 0, 1, 3).reshape(seq_len, batch, channels)), None


def causal_sdpa(model):
    """``model`` (a fairseq ``transformer_lm``, changed in place) with each self-attention one
    ``scaled_dot_product_attention(..., is_causal=True)`` call and no ``(T, T)`` mask built:
    what a user who wrote the attention for speed would run (flash on a GPU in fp16/bf16)."""
    decoder = model.decoder
    decoder.buffered_future_mask = lambda tensor: None  # the (T, T) float mask fairseq builds
    for layer in decoder.layers:
        layer.self_attn.forward = types.MethodType(_causal_sdpa_forward, layer.self_attn)
    return model


def measure(
    model, seq_len: int, repeat: int, device: str = "cpu", precision: str = "fp32", saved_tensors: bool = False
) -> dict:
    """One training step of ``model`` on ``seq_len`` random characters, as fairseq trains it
    in ``precision`` (the model cast to it, the loss in float32).

    Returns:
        :func:`~.step_profile.measure_step`'s figures and ``chars_per_s``; ``{"error": ...}``
        when it ran out of memory.
    """
    model = cast_as_fairseq(model.to(device), precision)
    tokens = torch.randint(4, VOCAB, (1, seq_len), device=device)

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(tokens)[0]
        torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), tokens.view(-1)).backward()

    try:
        # Two warm-up steps on GPU: the first compiles FlexAttention's kernels, and with compiled
        # layers a shape's first two steps compile them (static, then dynamic): timing starts
        # after both.
        warmup = 2 if devices.on_gpu(device) else 1
        figures = measure_step(step, model, device, repeat, warmup, saved_tensors)
    except (RuntimeError, MemoryError) as err:  # out of memory is a result, not a crash
        return {"error": str(err).splitlines()[0][:120]}
    return {"step_s": figures["step_s"], "chars_per_s": seq_len / figures["step_s"], **figures}


PEERS = ("transformer_lm", "transformer_lm_causal_sdpa")


def peer(name: str, seq_len: int, sizes: dict, dropout: float, attention_dropout: float, checkpoint: bool):
    """The peer ``name`` of :data:`PEERS`, as wide and deep as ``sizes``, in train mode."""
    model = transformer_lm(seq_len, sizes, dropout, attention_dropout, checkpoint)
    return causal_sdpa(model) if name == "transformer_lm_causal_sdpa" else model


def phase5_step(
    seq_len: int, threads: int, device: str, precision: str, dropout: float = 0.0, attention_dropout: float = 0.0,
    compile_layers: bool = False,
) -> dict:  # fmt: skip
    """One checkpointed training step at the phase-5 shape, in a child process (an OOM
    kill is a result, not a crash)."""
    return {
        "seq_len": seq_len,
        **run_isolated(
            "longformer_fs.benchmarks.lm:phase5_measurement",
            threads,
            seq_len=seq_len,
            device=device,
            precision=precision,
            dropout=dropout,
            attention_dropout=attention_dropout,
            compile_layers=compile_layers,
        ),
    }


def phase5_measurement(
    seq_len: int, device: str = "cpu", precision: str = "fp32", dropout: float = 0.0, attention_dropout: float = 0.0,
    compile_layers: bool = False,
) -> dict:  # fmt: skip
    model, windows = longformer_small(5, checkpoint=True, dropout=dropout, attention_dropout=attention_dropout,
                                      compile_layers=compile_layers)  # fmt: skip
    return {"windows": windows, **measure(model, seq_len, 1, device, precision)}


def _cells(result: dict) -> str:
    """A model's throughput and memory cells, or its error."""
    if "error" in result:
        return f"{'error: ' + result['error'][:20]:>27}"
    return f"{result['chars_per_s']:>18.0f} {result['peak_gib']:>8.2f}"


def main(args: argparse.Namespace) -> int:
    training = training_of(args, recipe(args.phase))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours, windows = longformer_small(
        args.phase, training.checkpoint_activations, dropout=training.dropout,
        attention_dropout=training.attention_dropout, compile_layers=training.compile_layers,
    )  # fmt: skip
    sizes = phase_settings("small", args.phase).model
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seq_len in tqdm(args.seq_lens, desc="bench lm", unit="length"):
        row = {"seq_len": seq_len}
        row["longformer_lm_small"] = measure(ours, seq_len, args.repeat, args.device, training.precision,
                                             args.saved_tensors)  # fmt: skip
        for name in PEERS:
            model = peer(name, seq_len, sizes, training.dropout, training.attention_dropout,
                         training.checkpoint_activations)  # fmt: skip
            row[name] = measure(model, seq_len, args.repeat, args.device, training.precision, args.saved_tensors)
            del model
        rows.append(row)
        # Written as it goes: a long run that is stopped keeps what it measured.
        (args.out / "partial.json").write_text(json.dumps(rows, indent=2))
    print(
        f"training step, batch 1, {args.device}, {args.threads} thread(s); longformer_lm_small windows {windows} "
        f"(phase {args.phase}), dilation on 2 heads; every model in {training.describe()}"
        + ("; longformer_lm_small's layers compiled, the peers' eager" if training.compile_layers else "")
    )
    print(
        f"{'T':>6} {'longformer chars/s':>18} {'peak GiB':>8} {'transformer chars/s':>19} {'peak GiB':>8} "
        f"{'speedup':>7} {'causal SDPA chars/s':>19} {'peak GiB':>8} {'speedup':>7}"
    )
    for row in rows:
        ours_row = row["longformer_lm_small"]
        cells = [f"{row['seq_len']:>6} {_cells(ours_row)}"]
        for name, key in zip(PEERS, ("speedup", "speedup_vs_causal_sdpa"), strict=True):
            theirs = row[name]
            both = "error" not in ours_row and "error" not in theirs
            row[key] = ours_row["chars_per_s"] / theirs["chars_per_s"] if both else None
            speed = f"{row[key]:.2f}" if both else "-"
            cells.append(f"{_cells(theirs).replace('  ', ' ', 1):>28} {speed:>7}")
        print(" ".join(cells))
    print("attention each step ran (band attention: backend (kind of call) x calls; SDPA: the kernel that ran):")
    for row in rows:
        for name in ("longformer_lm_small", *PEERS):
            print(f"{row['seq_len']:>6} {name:<27} {attention_summary(row[name])}")
    result = {"rows": rows, "windows": windows, "threads": args.threads, "training": training.figures()}
    if args.phase5_len:
        result["phase5"] = phase5_step(args.phase5_len, args.threads, args.device, training.precision,
                                       training.dropout, training.attention_dropout,
                                       training.compile_layers)  # fmt: skip
        p5 = result["phase5"]
        state = (
            f"{p5['step_s']:.1f} s, peak {p5['peak_gib']:.2f} GiB of tensors"
            if "error" not in p5
            else f"failed: {p5['error']}"
        )
        print(
            f"phase-5 shape ({args.phase5_len} characters, windows {p5.get('windows', '512:131072')}, "
            f"activation checkpointing): one training step {state}"
        )
    write_results(args.out, result)
    return 0
