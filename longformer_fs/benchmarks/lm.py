"""``longformer-fs bench lm``: training throughput of the character LM vs full attention.

``longformer_lm_small`` (12 layers, width 512, 8 heads, the recipe's windows and
dilation for the chosen phase) against fairseq's ``transformer_lm`` of the same width
and depth with full attention, both pre-layernorm GeLU, one sequence per step,
forward+backward, side by side in one process. A last row runs one training step of
the small model at the phase-5 shape (23,040 characters) with activation checkpointing.
"""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import torch
from fairseq.data import Dictionary
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture
from tqdm import tqdm

from ..conventions import PAD, byte_symbol
from ..modules.char_lm_decoder import DecoderShape, LongformerDecoder
from ..modules.per_layer import dilation_pattern, layer_values
from ..recipes import phase_settings
from . import int_list as _int_list
from . import write_results
from .measure import add_device_arguments, autocast, median_time, peak_memory_bytes, precision_of, run_isolated

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
    add_device_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("bench_out/lm"), help="directory for results.json")


def longformer_small(phase: int, checkpoint: bool, layers: int | None = None) -> tuple[LongformerDecoder, str]:
    """``longformer_lm_small`` with the windows and dilations of recipe phase ``phase``; with
    ``layers`` (the report's ``--toy``), that many of its layers, spread from the first to
    the last, each with its own window and dilations."""
    recipe = phase_settings("small", phase)
    m = recipe.model
    depth, heads = m["decoder_layers"], m["decoder_attention_heads"]
    windows = layer_values(recipe.attention_window, depth)
    dilations = dilation_pattern(m["attention_dilation"], depth, heads, m["dilated_heads"])
    if layers is not None:
        kept = [round(i * (depth - 1) / max(1, layers - 1)) for i in range(layers)]
        windows, dilations = [windows[i] for i in kept], [dilations[i] for i in kept]
    shape = DecoderShape(VOCAB, PAD, m["decoder_embed_dim"], m["decoder_ffn_embed_dim"], heads, windows, dilations)
    model = LongformerDecoder(shape, dropout=0.0, checkpoint_activations=checkpoint).train()
    return model, recipe.attention_window


def peer_sizes(ours: LongformerDecoder, phase: int) -> dict:
    """The size preset's model settings, as deep as ``ours``: what its transformer_lm peer is built with."""
    return {**phase_settings("small", phase).model, "decoder_layers": len(ours.blocks)}


def transformer_lm(seq_len: int, model: dict):
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
        dropout=0.0,
        attention_dropout=0.0,
        activation_fn="gelu",
        decoder_normalize_before=True,
        tokens_per_sample=seq_len,
        max_target_positions=seq_len,
        share_decoder_input_output_embed=True,
    )
    base_lm_architecture(args)
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return TransformerLanguageModel.build_model(args, task).train()


def measure(model, seq_len: int, repeat: int, device: str = "cpu", precision: str = "fp32") -> dict:
    model = model.to(device)
    tokens = torch.randint(4, VOCAB, (1, seq_len), device=device)

    def step():
        model.zero_grad(set_to_none=True)
        with autocast(device, precision):
            logits = model(tokens)[0]
        torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), tokens.view(-1)).backward()

    try:
        # Two warm-up steps on GPU: the first compiles FlexAttention's kernels.
        seconds = median_time(step, device, repeat=repeat, warmup=2 if torch.device(device).type == "cuda" else 1)
        peak = peak_memory_bytes(step, device)
    except (RuntimeError, MemoryError) as err:  # out of memory is a result, not a crash
        return {"error": str(err).splitlines()[0][:120]}
    return {"step_s": seconds, "chars_per_s": seq_len / seconds, "peak_gib": peak / 2**30}


def phase5_step(seq_len: int, threads: int, device: str, precision: str) -> dict:
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
        ),
    }


def phase5_measurement(seq_len: int, device: str = "cpu", precision: str = "fp32") -> dict:
    model, windows = longformer_small(5, checkpoint=True)
    return {"windows": windows, **measure(model, seq_len, 1, device, precision)}


def _cells(result: dict) -> str:
    """A model's throughput and memory cells, or its error."""
    if "error" in result:
        return f"{'error: ' + result['error'][:20]:>27}"
    return f"{result['chars_per_s']:>18.0f} {result['peak_gib']:>8.2f}"


def main(args: argparse.Namespace) -> int:
    precision = precision_of(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours, windows = longformer_small(args.phase, checkpoint=False)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seq_len in tqdm(args.seq_lens, desc="bench lm", unit="length"):
        row = {"seq_len": seq_len, "longformer_lm_small": measure(ours, seq_len, args.repeat, args.device, precision)}
        baseline = transformer_lm(seq_len, phase_settings("small", args.phase).model)
        row["transformer_lm"] = measure(baseline, seq_len, args.repeat, args.device, precision)
        del baseline
        rows.append(row)
        # Written as it goes: a long run that is stopped keeps what it measured.
        (args.out / "partial.json").write_text(json.dumps(rows, indent=2))
    print(
        f"training step, batch 1, {args.device} {precision}, {args.threads} thread(s); "
        f"longformer_lm_small windows {windows} (phase {args.phase}), dilation on 2 heads"
    )
    print(
        f"{'T':>6} {'longformer chars/s':>18} {'peak GiB':>8} {'transformer chars/s':>19} {'peak GiB':>8} "
        f"{'speedup':>7}"
    )
    for row in rows:
        a, b = row["longformer_lm_small"], row["transformer_lm"]
        speed = f"{a['chars_per_s'] / b['chars_per_s']:.2f}" if "error" not in a and "error" not in b else "-"
        print(f"{row['seq_len']:>6} {_cells(a)} {_cells(b).replace('  ', ' ', 1):>28} {speed:>7}")
        row["speedup"] = None if speed == "-" else float(speed)
    result = {"rows": rows, "windows": windows, "threads": args.threads}
    if args.phase5_len:
        result["phase5"] = phase5_step(args.phase5_len, args.threads, args.device, precision)
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
