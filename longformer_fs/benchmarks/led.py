"""``longformer-fs bench led``: one training step of LED against BART with full attention.

Both models have ``led_base``'s shape (BART-base: 6 + 6 layers, width 768, 12 heads), the
same source positions and a 512-token target; LED's encoder uses windows of 512 per side
(the paper's 1,024) and a global first token, BART's uses fairseq's full self-attention
(PyTorch's scaled-dot-product attention). One step is encoder and decoder, forward and
backward, on one document; every measurement runs in its own process, so a run that
outgrows the memory is a result ("killed") rather than the end of the benchmark.
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

from ..conventions import BOS, EOS
from ..models.led import LEDModel, led_base_architecture
from . import int_list, write_results
from .measure import add_device_arguments, autocast, median_time, peak_memory_bytes, precision_of, run_isolated

VOCAB = 50265  # BART's dictionary


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
    add_device_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("bench_out/led"), help="directory for results.json")


def build_args(
    kind: str, source_len: int, target_len: int, window: int, layers: int | None, width: int | None,
    checkpoint_activations: bool = False,
) -> argparse.Namespace:  # fmt: skip
    """The settings of :func:`build`'s model, its architecture's defaults filled in."""
    args = argparse.Namespace(
        max_source_positions=source_len,
        max_target_positions=target_len,
        dropout=0.0,
        attention_dropout=0.0,
        share_all_embeddings=True,
        attention_window=str(window),
        checkpoint_activations=checkpoint_activations,
    )
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
    checkpoint_activations: bool = False,
):  # fmt: skip
    """An untrained ``led_base``- or ``bart_base``-shaped model for these lengths (with
    ``checkpoint_activations``, its layers recompute their activations in the backward)."""
    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(str(i))
    args = build_args(kind, source_len, target_len, window, layers, width, checkpoint_activations)
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary, cfg=None)
    return (LEDModel if kind == "led" else BARTModel).build_model(args, task)


def document(source_len: int) -> torch.Tensor:
    """A source of random tokens, ``<s>`` first and ``</s>`` last: ``(1, source_len)``."""
    src = torch.randint(4, VOCAB, (1, source_len))
    src[0, 0], src[0, -1] = BOS, EOS
    return src


def step_measurement(
    kind: str, source_len: int, target_len: int, window: int, layers: int | None, width: int | None, repeat: int,
    device: str = "cpu", precision: str = "fp32", checkpoint_activations: bool = False,
) -> dict:  # fmt: skip
    """Seconds and peak bytes of one training step (run in a child process)."""
    torch.manual_seed(0)
    model = build(kind, source_len, target_len, window, layers, width, checkpoint_activations).to(device).train()
    src = document(source_len)
    tgt = torch.randint(4, VOCAB, (1, target_len))
    prev = torch.cat([torch.tensor([[EOS]]), tgt[:, :-1]], dim=1)
    src, tgt, prev, lengths = (x.to(device) for x in (src, tgt, prev, torch.tensor([source_len])))

    def step():
        model.zero_grad(set_to_none=True)
        with autocast(device, precision):
            logits = model(src, lengths, prev)[0]
        torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1)).backward()

    # On GPU one warm-up step: the first compiles FlexAttention's kernels.
    seconds = median_time(step, device, repeat=repeat, warmup=1 if torch.device(device).type == "cuda" else 0)
    peak = peak_memory_bytes(step, device)
    return {"step_s": seconds, "tokens_per_s": source_len / seconds, "peak_gib": peak / 2**30}


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

    seconds = median_time(read, device, repeat=1, warmup=1 if torch.device(device).type == "cuda" else 0)
    peak = peak_memory_bytes(read, device)
    return {"read_s": seconds, "tokens_per_s": source_len / seconds, "peak_gib": peak / 2**30}


def main(args: argparse.Namespace) -> int:
    precision = precision_of(args)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    jobs = [(n, kind) for n in args.source_lens for kind in ("led", "bart")]
    for n, kind in tqdm(jobs, desc="bench led", unit="step"):
        result = run_isolated("longformer_fs.benchmarks.led:step_measurement", args.threads, kind=kind, source_len=n,
                              target_len=args.target_len, window=args.window, layers=args.layers, width=args.width,
                              repeat=args.repeat, device=args.device, precision=precision)  # fmt: skip
        if kind == "led":
            rows.append({"source_len": n})
        rows[-1][kind] = result
        (args.out / "partial.json").write_text(json.dumps(rows, indent=2))
    print(
        f"one training step (encoder + decoder, forward + backward), one document, {args.target_len}-token "
        f"summary, {args.device} {precision}, {args.threads} thread(s); LED window {args.window} per side vs BART "
        "full attention (SDPA)"
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
    ok = [r for r in rows if "error" not in r["led"]]
    if len(ok) >= 2:  # linear memory: GiB per source token, first and last length
        first, last = ok[0], ok[-1]
        per_token = [r["led"]["peak_gib"] / r["source_len"] for r in (first, last)]
        print(
            f"LED peak memory per source token: {per_token[0] * 2**20:.1f} KiB at {first['source_len']}, "
            f"{per_token[1] * 2**20:.1f} KiB at {last['source_len']}"
        )
    write_results(args.out, {"rows": rows, "threads": args.threads})
    return 0
