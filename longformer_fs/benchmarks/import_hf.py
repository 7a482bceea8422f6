"""``longformer-fs bench import-hf``: what importing a released-size Longformer costs.

Builds, with transformers, a directory shaped like allenai's ``longformer-base-4096``
(12 layers, width 768, 4,098 positions, 50,265 ids, random weights; a byte-level BPE of
that size, its merges made up) in the weight format asked for, then runs
``longformer-fs import-hf`` on it in a fresh process, ``--repeat`` times. Reports the
seconds, the process's peak resident memory, the same for a process that only starts
(imports what the command imports), and the weights' size: the import's own memory is
the difference, to compare with one copy of the weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..hf_format.gpt2_numbering import byte_characters

SIZES = {"base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
GPT2_MERGES, ROBERTA_ROWS = 50000, 50265


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=tuple(SIZES), default="base", help="longformer-base-4096 or -large's shape")
    parser.add_argument("--weights", choices=("safetensors", "bin"), default="safetensors", help="weight format")
    parser.add_argument("--repeat", type=int, default=3, help="imports to time")
    parser.add_argument("--out", type=Path, default=Path("bench_out/import_hf"), help="work and results directory")


def made_up_tokenizer(directory: Path, merges: int = GPT2_MERGES) -> None:
    """vocab.json + merges.txt with RoBERTa's specials, 256 bytes, ``merges`` merges (of
    two earlier pieces each, all distinct) and ``<mask>``: GPT-2's shape, not its text."""
    pieces, pairs, seen = byte_characters(), [], set(byte_characters())
    left = 0
    while len(pairs) < merges:
        for right in range(256):
            a, b = pieces[left], pieces[right]
            if a + b not in seen:
                seen.add(a + b)
                pairs.append((a, b))
                pieces.append(a + b)
                if len(pairs) == merges:
                    break
        left += 1
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab |= {piece: 4 + i for i, piece in enumerate(pieces + ["<|endoftext|>"])}
    vocab["<mask>"] = ROBERTA_ROWS - 1  # RoBERTa's three padding rows lie between
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in pairs))


def build(directory: Path, size: str, weights: str) -> int:
    """The HF directory; returns the weights' bytes."""
    import torch
    from transformers import LongformerConfig, LongformerForMaskedLM

    layers, hidden, heads, ffn = SIZES[size]
    config = LongformerConfig(vocab_size=ROBERTA_ROWS, hidden_size=hidden, num_hidden_layers=layers,
                              num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=4098,
                              attention_window=[512] * layers, type_vocab_size=1, layer_norm_eps=1e-5)  # fmt: skip
    model = LongformerForMaskedLM(config)
    model.save_pretrained(directory)
    if weights == "bin":
        (directory / "model.safetensors").unlink()
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, directory / "pytorch_model.bin")
    made_up_tokenizer(directory)
    return sum(p.stat().st_size for p in directory.glob(f"*.{'bin' if weights == 'bin' else 'safetensors'}"))


# Runs argv[1:] and prints its seconds and peak resident memory. A process's peak survives
# fork and exec, so a child forked from this (large) process would report this one's size;
# this small launcher, started fresh, forks the measured command instead.
_LAUNCHER = """
import resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def peak_of(command: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MB of ``command``, run alone."""
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], check=True, capture_output=True, text=True)
    seconds, megabytes = out.stdout.split()
    return float(seconds), float(megabytes)


def main(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    source = args.out / f"hf_{args.size}_{args.weights}"
    if not (source / "config.json").is_file():
        shutil.rmtree(source, ignore_errors=True)
        start = time.perf_counter()
        build(source, args.size, args.weights)
        print(f"built {source} in {time.perf_counter() - start:.0f} s")
    weights_mb = sum(p.stat().st_size for p in source.iterdir() if p.suffix in (".bin", ".safetensors")) / 1e6
    # The command's start alone (its imports): the floor under the import's peak.
    startup = [sys.executable, "-c", "import longformer_fs.conversion.import_hf, longformer_fs.commands.import_hf"]
    start_s, start_mb = peak_of(startup)
    runs, peaks = [], []
    for _ in range(args.repeat):
        out = args.out / "imported"
        shutil.rmtree(out, ignore_errors=True)
        seconds, peak = peak_of(
            [sys.executable, "-m", "longformer_fs.cli", "import-hf", str(source), "--out", str(out)]
        )
        runs.append(seconds)
        peaks.append(peak)
    peak = max(peaks)
    result = {
        "size": args.size,
        "weights": args.weights,
        "weights_mb": round(weights_mb),
        "seconds": [round(s, 2) for s in runs],
        "peak_rss_mb": round(peak),
        "startup_seconds": round(start_s, 2),
        "startup_rss_mb": round(start_mb),
        "import_rss_mb": round(peak - start_mb),
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print(
        f"import-hf of a longformer-{args.size}-4096-shaped {args.weights} ({weights_mb:.0f} MB of weights): "
        f"{min(runs):.1f} s (best of {len(runs)}; start-up alone {start_s:.1f} s), peak RSS {peak:.0f} MB "
        f"(start-up alone {start_mb:.0f} MB: the import itself {peak - start_mb:.0f} MB, "
        f"{(peak - start_mb) / weights_mb:.2f} x the weights)"
    )
    return 0
