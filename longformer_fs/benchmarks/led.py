"""``longformer-fs bench led``: one training step of LED against BART with full attention.

Both models have ``led_base``'s shape (BART-base: 6 + 6 layers, width 768, 12 heads), the
same source positions and a 512-token target; LED's encoder uses windows of 512 per side
(the paper's 1,024) and a global first token, BART's uses fairseq's full self-attention
(PyTorch's scaled-dot-product attention). One step is encoder and decoder, forward and
backward, on one document; every measurement runs in its own process, so a run that
outgrows the memory is a result ("killed") rather than the end of the benchmark.

Both train as ``recipes/summarization/led_base_16k.yaml`` does, unless flags say otherwise:
its dropout and attention dropout, its precision (fp16 on CUDA, as fairseq's ``--fp16``
casts the model; float32 without CUDA) and its activation checkpointing. LED's layers run
``torch.compile``d on CUDA (``--compile-layers``; eager elsewhere), BART's as fairseq runs
them. Each result names the attention backend of every band-attention call of LED's step
and the kernel of every scaled-dot-product attention call (BART's, and LED's decoder's).
"""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import torch
from fairseq.data import Dictionary
from fairseq.models.bart.model import BARTModel, bart_base_architecture
from tqdm import tqdm

from .. import devices
from ..conventions import BOS, EOS
from ..models.led import LEDModel, led_base_architecture
from ..recipes import RECIPES
from . import int_list, write_results
from .measure import add_device_arguments, autocast, cast_as_fairseq, median_time, peak_memory_bytes, run_isolated
from .recipe_training import add_training_arguments, training_of, warmup_steps
from .step_profile import add_saved_tensors_argument, attention_summary, measure_step

VOCAB = 50265  # BART's dictionary
RECIPE = RECIPES / "summarization" / "led_base_16k.yaml"  # the training both models get


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source-lens", type=int_list, default=[1024, 4096, 8192, 16384], help="source tokens per document"
    )
    parser.add_argument("--target-len", type=int, default=512, help="summary tokens")
    parser.add_argument("--window", type=int, default=512, help="LED's one-sided window")
    parser.add_argument("--layers", type=int, default=None, help="override the depth of encoder and decoder")
    parser.add_argument("--width", type=int, default=None, help="override the width (FFN 4x, 64 per head)")
    parser.add_argument("--repeat", type=int, default=1, help="timed steps per measurement (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_arguments(parser, precision=False)
    add_training_arguments(parser, "recipes/summarization/led_base_16k.yaml")
    add_saved_tensors_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("bench_out/led"), help="directory for results.json")


def build_args(
    kind: str, source_len: int, target_len: int, window: int, layers: int | None, width: int | None,
    checkpoint_activations: bool = False, dropout: float = 0.0, attention_dropout: float = 0.0,
    compile_layers: bool = False,
) -> argparse.Namespace:  # fmt: skip
    """The settings of :func:`build`'s model, its architecture's defaults filled in; with
    ``compile_layers``, LED's layers compile in training (BART runs as fairseq runs it:
    the flag is LED's alone)."""
    args = argparse.Namespace(
        max_source_positions=source_len,
        max_target_positions=target_len,
        dropout=dropout,
        attention_dropout=attention_dropout,
        share_all_embeddings=True,
        attention_window=str(window),
        checkpoint_activations=checkpoint_activations,
    )
    if kind == "led":
        args.compile_layers = compile_layers
    if layers:
        args.encoder_layers = args.decoder_layers = layers
    if width:
        args.encoder_embed_dim = args.decoder_embed_dim = width
        args.encoder_ffn_embed_dim = args.decoder_ffn_embed_dim = 4 * width
        args.encoder_attention_heads = args.decoder_attention_heads = max(1, width // 64)
    (led_base_architecture if kind == "led" else bart_base_architecture)(args)
    return args


def build(
    kind: str, source_len: int, target_len: int, window: int, layers: int | None, width: int | None,
    checkpoint_activations: bool = False, dropout: float = 0.0, attention_dropout: float = 0.0,
    compile_layers: bool = False,
):  # fmt: skip
    """An untrained ``led_base``- or ``bart_base``-shaped model for these lengths (with
    ``checkpoint_activations``, its layers recompute their activations in the backward; with
    ``compile_layers``, LED's layers compile in training)."""
    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(str(i))
    args = build_args(kind, source_len, target_len, window, layers, width, checkpoint_activations, dropout,
                      attention_dropout, compile_layers)  # fmt: skip
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary, cfg=None)
    return (LEDModel if kind == "led" else BARTModel).build_model(args, task)


def document(source_len: int) -> torch.Tensor:
    """A source of random tokens, ``<s>`` first and ``</s>`` last: ``(1, source_len)``."""
    src = torch.randint(4, VOCAB, (1, source_len))
    src[0, 0], src[0, -1] = BOS, EOS
    return src


def step_measurement(
    kind: str, source_len: int, target_len: int, window: int, layers: int | None, width: int | None, repeat: int,
    device: str = "cpu", precision: str = "fp32", checkpoint_activations: bool = False, dropout: float = 0.0,
    attention_dropout: float = 0.0, saved_tensors: bool = False, compile_layers: bool = False,
) -> dict:  # fmt: skip
    """One training step of ``kind`` (``led`` or ``bart``), as fairseq trains it in
    ``precision`` (the model cast to it, the loss in float32), with these dropouts and, for
    LED, compiled layers when ``compile_layers`` (BART's never); run in a child process by
    ``bench led``.

    Returns:
        :func:`~.step_profile.measure_step`'s figures (seconds, peak memory, the attention
        backends and kernels, the step's profile) and ``tokens_per_s``: source tokens a second.
    """
    torch.manual_seed(0)
    compile_layers = compile_layers and kind == "led"
    model = build(kind, source_len, target_len, window, layers, width, checkpoint_activations, dropout,
                  attention_dropout, compile_layers)  # fmt: skip
    model = cast_as_fairseq(model.to(device), precision).train()
    src = document(source_len)
    tgt = torch.randint(4, VOCAB, (1, target_len))
    prev = torch.cat([torch.tensor([[EOS]]), tgt[:, :-1]], dim=1)
    src, tgt, prev, lengths = (x.to(device) for x in (src, tgt, prev, torch.tensor([source_len])))

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(src, lengths, prev)[0]
        torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1)).backward()

    # On GPU one warm-up step: the first compiles FlexAttention's kernels. With compiled
    # layers two: a shape's first two steps compile the layers (static, then dynamic), and
    # timing starts after them (warmup_steps).
    warmup = warmup_steps(device, compile_layers, 1 if devices.on_gpu(device) else 0)
    figures = measure_step(step, model, device, repeat, warmup, saved_tensors)
    return {"step_s": figures["step_s"], "tokens_per_s": source_len / figures["step_s"], **figures}


def encoder_measurement(
    source_len: int, window: int, layers: int | None, width: int | None, device: str = "cpu", precision: str = "fp32"
) -> dict:
    """Seconds and peak bytes of LED's encoder reading one document, in inference."""
    torch.manual_seed(0)
    model = build("led", source_len, 8, window, layers, width).to(device).eval()
    src = document(source_len)
    src, lengths = src.to(device), torch.tensor([source_len], device=device)

    def read():
        with torch.inference_mode(), autocast(device, precision):
            model.encoder(src, src_lengths=lengths)

    seconds = median_time(read, device, repeat=1, warmup=1 if devices.on_gpu(device) else 0)
    peak = peak_memory_bytes(read, device)
    return {"read_s": seconds, "tokens_per_s": source_len / seconds, "peak_gib": peak / 2**30}


def main(args: argparse.Namespace) -> int:
    training = training_of(args, RECIPE)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    jobs = [(n, kind) for n in args.source_lens for kind in ("led", "bart")]
    for n, kind in tqdm(jobs, desc="bench led", unit="step"):
        result = run_isolated("longformer_fs.benchmarks.led:step_measurement", args.threads, kind=kind, source_len=n,
                              target_len=args.target_len, window=args.window, layers=args.layers, width=args.width,
                              repeat=args.repeat, device=args.device, precision=training.precision,
                              checkpoint_activations=training.checkpoint_activations, dropout=training.dropout,
                              attention_dropout=training.attention_dropout, saved_tensors=args.saved_tensors,
                              compile_layers=training.compile_layers)  # fmt: skip
        if kind == "led":
            rows.append({"source_len": n})
        rows[-1][kind] = result
        (args.out / "partial.json").write_text(json.dumps(rows, indent=2))
    print(
        f"one training step (encoder + decoder, forward + backward), one document, {args.target_len}-token "
        f"summary, {args.device}, {args.threads} thread(s); LED window {args.window} per side vs BART "
        "full attention (SDPA)"
    )
    print(
        f"both train in {training.describe()}"
        + ("; LED's layers compiled, BART's eager" if training.compile_layers else "")
    )
    print(
        f"{'source':>7} {'LED tok/s':>10} {'LED GiB':>8} {'BART tok/s':>11} {'BART GiB':>9} {'speedup':>8} "
        f"{'memory ratio':>13}"
    )
    for row in rows:
        led, bart = row["led"], row["bart"]

        def cells(r):
            return f"{r['tokens_per_s']:>10.0f} {r['peak_gib']:>8.2f}" if "error" not in r else f"{r['error'][:19]:>19}"

        both = "error" not in led and "error" not in bart
        row["speedup"] = led["tokens_per_s"] / bart["tokens_per_s"] if both else None
        row["memory_ratio"] = bart["peak_gib"] / led["peak_gib"] if both else None
        ratios = f"{row['speedup']:>8.2f} {row['memory_ratio']:>13.2f}" if both else f"{'-':>8} {'-':>13}"
        print(f"{row['source_len']:>7} {cells(led)} {cells(bart):>21} {ratios}")
    print("attention each step ran (band attention: backend (kind of call) x calls; SDPA: the kernel that ran):")
    for row in rows:
        for kind in ("led", "bart"):
            print(f"{row['source_len']:>7} {kind:<5} {attention_summary(row[kind])}")
    ok = [r for r in rows if "error" not in r["led"]]
    if len(ok) >= 2:  # linear memory: GiB per source token, first and last length
        first, last = ok[0], ok[-1]
        per_token = [r["led"]["peak_gib"] / r["source_len"] for r in (first, last)]
        print(
            f"LED peak memory per source token: {per_token[0] * 2**20:.1f} KiB at {first['source_len']}, "
            f"{per_token[1] * 2**20:.1f} KiB at {last['source_len']}"
        )
    write_results(args.out, {"rows": rows, "threads": args.threads, "training": training.figures()})
    return 0
