"""``longformer-fs bench sample``: writing text at long contexts, per character.

At each context length C, side by side in one process, with ``longformer_lm_small`` (the
recipe's windows and dilations for ``--phase``) and fairseq's ``transformer_lm`` of the
same width and depth:

- **incremental**: our decoder's step, each layer attending over the keys and values its
  window reaches (a ring buffer of at most ``w * max(d) + 1`` positions);
- **recompute**: the same model running its whole last C characters for every new one;
- **transformer_lm**: fairseq's incremental decoding, attending over all C positions.

The caches hold what C characters leave, filled with random keys and values: a step's
cost and memory depend on their sizes, not their values. Reported: characters per second
(median of ``--repeat``), the decoding state's size, and the step's peak tensor memory
above it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tqdm import tqdm

from . import int_list as _int_list
from . import write_results
from .lm import VOCAB, longformer_small, peer_sizes, transformer_lm
from .measure import add_device_arguments, median_time, peak_memory_bytes, precision_of

MIB = 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--contexts", type=_int_list, default=[1024, 8192, 32768], help="characters of context")
    parser.add_argument("--phase", type=int, default=1, choices=range(1, 6), help="recipes/char_lm/small_phaseN")
    parser.add_argument("--steps", type=int, default=8, help="characters written per timing")
    parser.add_argument("--repeat", type=int, default=3, help="timings per measurement (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("bench_out/sample"), help="directory for results.json")


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def incremental(model, context: int, steps: int, repeat: int, device: str) -> dict:
    """Our decoder's step after ``context`` characters."""
    caches = model.new_caches()
    for block, cache in zip(model.blocks, caches, strict=True):
        attn = block.attn
        held = min(cache.capacity, context)
        shape = (1, attn.num_heads, held, attn.head_dim)
        cache.store(torch.randn(shape, device=device), torch.randn(shape, device=device))
        cache.length = context
    token = torch.randint(4, VOCAB, (1, 1), device=device)
    model(token, caches)  # computes the position rows up to the window, once, as decoding does

    def write():
        for _ in range(steps):
            model(token, caches)

    seconds = median_time(write, device, repeat=repeat, warmup=1)
    state = _tensor_bytes(t for c in caches for t in (c.keys, c.values, c.position_rows))
    return {
        "chars_per_s": steps / seconds,
        "state_mib": state / MIB,
        "peak_mib": peak_memory_bytes(write, device) / MIB,
    }


def recompute(model, context: int, repeat: int, device: str) -> dict:
    """The model over its last ``context`` characters, for one new character."""
    tokens = torch.randint(4, VOCAB, (1, context), device=device)
    seconds = median_time(lambda: model(tokens), device, repeat=repeat, warmup=1)
    return {
        "chars_per_s": 1 / seconds,
        "state_mib": 0.0,
        "peak_mib": peak_memory_bytes(lambda: model(tokens), device) / MIB,
    }


def full_attention(model, context: int, steps: int, repeat: int, device: str) -> dict:
    """fairseq's ``transformer_lm`` step after ``context`` characters: its incremental state
    holds every position's keys and values."""
    state: dict = {}
    for layer in model.decoder.layers:
        attn = layer.self_attn
        shape = (1, attn.num_heads, context, attn.head_dim)
        attn._set_input_buffer(
            state,
            {"prev_key": torch.randn(shape, device=device), "prev_value": torch.randn(shape, device=device),
             "prev_key_padding_mask": None},
        )  # fmt: skip
    prefix = torch.randint(4, VOCAB, (1, context + 1), device=device)  # its length gives the new position

    def write():
        for _ in range(steps):
            model.decoder(prefix, incremental_state=state)
            for layer in model.decoder.layers:  # keep the context at C: drop what the step appended
                buffer = layer.self_attn._get_input_buffer(state)
                buffer["prev_key"], buffer["prev_value"] = (
                    buffer["prev_key"][:, :, :context],
                    buffer["prev_value"][:, :, :context],
                )
                layer.self_attn._set_input_buffer(state, buffer)

    seconds = median_time(write, device, repeat=repeat, warmup=1)
    buffers = [layer.self_attn._get_input_buffer(state) for layer in model.decoder.layers]
    held = _tensor_bytes(buffer[k] for buffer in buffers for k in ("prev_key", "prev_value"))
    return {"chars_per_s": steps / seconds, "state_mib": held / MIB, "peak_mib": peak_memory_bytes(write, device) / MIB}


def measure_context(ours, context: int, steps: int, repeat: int, device: str, phase: int) -> dict:
    """One row: our decoder writing after ``context`` characters, incrementally and by
    recomputing, and ``transformer_lm`` of its width and depth (built here)."""
    with torch.inference_mode():
        peer = transformer_lm(context + steps + 1, peer_sizes(ours, phase)).to(device).eval()
        return {
            "context": context,
            "incremental": incremental(ours, context, steps, repeat, device),
            "recompute": recompute(ours, context, repeat, device),
            "transformer_lm": full_attention(peer, context, steps, repeat, device),
        }


def main(args: argparse.Namespace) -> int:
    precision_of(args)  # writing text runs in float32 here: --fp16/--bf16 are refused off CUDA, ignored on it
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours, windows = longformer_small(args.phase, checkpoint=False)
    ours = ours.to(args.device).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for context in tqdm(args.contexts, desc="bench sample", unit="context"):
        rows.append(measure_context(ours, context, args.steps, args.repeat, args.device, args.phase))
        (args.out / "partial.json").write_text(json.dumps(rows, indent=2))
    print(
        f"writing one character, batch 1, {args.device}, {args.threads} thread(s); longformer_lm_small windows "
        f"{windows} (phase {args.phase}) against transformer_lm of its width and depth"
    )
    print(
        f"{'context':>8}  "
        + "  ".join(f"{name + ' chars/s':>26} {'state MiB':>9}" for name in rows[0] if name != "context")
    )
    for row in rows:
        cells = [
            f"{row[name]['chars_per_s']:>26.3g} {row[name]['state_mib']:>9.1f}" for name in row if name != "context"
        ]
        print(f"{row['context']:>8}  " + "  ".join(cells))
    write_results(args.out, {"rows": rows, "windows": windows, "threads": args.threads, "device": args.device})
    return 0
