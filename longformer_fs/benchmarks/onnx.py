"""``longformer-fs bench onnx``: the exported files in onnxruntime against PyTorch.

Three ways of running one ``longformer_roberta_base``-shaped QA model (12 layers, width
768, window 256 a side, untrained weights) forward on one sequence with one global token:
the file ``export-onnx`` writes, in onnxruntime on the CPU, in float32 and with its linear
layers quantized to int8 (``--quantize int8``); our eager PyTorch model on the
``kernel`` backend; and HF's eager ``LongformerForQuestionAnswering`` holding the same
weights (the ``export-hf`` mapping). Each measurement runs in its own process; beside the
median time it reports the memory the forward adds to the loaded model (the process's peak
resident bytes, counted afresh once the model is loaded) and the loaded model's.

With ``--led``: one summary (beam 4, a fixed number of new tokens) of an ``led_base``-shaped
LED (untrained) by its exported files in onnxruntime (float32 and int8, the search of
``summarize-onnx``), by ``summarize``'s fairseq beam search, and by HF's LED ``generate`` with
the same settings and weights (``export-hf``'s mapping).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..checkpoint import Checkpoint
from ..export.hf import export_longformer
from ..export.onnx_encoder import trace
from ..export.onnx_quantize import quantize_file
from ..export.onnx_served import INPUTS, Head, ServedModel
from ..export.onnx_trace import DEFAULT_OPSET
from . import int_list, write_results
from .finetune import VOCAB, build_ours
from .measure import median_time, run_isolated

KINDS = {"onnxruntime": "onnxruntime (export-onnx's file)",
         "onnxruntime-int8": "onnxruntime, int8 linear layers (export-onnx --quantize int8)",
         "ours": "ours, eager (kernel backend)", "hf": "HF LongformerModel, eager"}  # fmt: skip
INT8_FILE = "model.int8.onnx"
DEFAULT_LENGTHS = [512, 4096, 16384]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-lens", type=int_list, default=DEFAULT_LENGTHS, help="comma-separated lengths")
    parser.add_argument("--window", type=int, default=256, help="one-sided window (HF's attention_window is twice)")
    parser.add_argument("--layers", type=int, default=None, help="override the depth (default: base, 12)")
    parser.add_argument("--repeat", type=int, default=3, help="timed forwards per measurement (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, default=Path("bench_out/onnx"), help="directory for the file and results")
    led = parser.add_argument_group("an LED summarizing (--led)")
    led.add_argument("--led", action="store_true", help="time summaries of an led_base-shaped LED instead "
                     "(--seq-lens are source tokens; default 4096,16384)")  # fmt: skip
    led.add_argument("--new-tokens", type=int, default=128, help="summary tokens (beam 4)")
    led.add_argument("--led-window", type=int, default=512, help="the LED's one-sided window")
    led.add_argument("--width", type=int, default=None, help="override the LED's width (FFN 4x, 64 per head)")


def _model(window: int, layers: int | None, max_length: int) -> ServedModel:
    torch.manual_seed(0)
    return ServedModel(build_ours(window, layers, max_length), Head("qa")).eval()


def _inputs(length: int) -> dict:
    generator = np.random.default_rng(0)
    ids = generator.integers(4, VOCAB - 1, size=(1, length))
    ids[0, 0], ids[0, -1] = 0, 2
    glob = np.zeros((1, length), dtype=np.int64)
    glob[0, 0] = 1
    return {"input_ids": ids.astype(np.int64), "attention_mask": np.ones_like(ids), "global_attention_mask": glob}


def forward_measurement(kind: str, path: str, length: int, window: int, layers: int | None, max_length: int,
                        repeat: int, ort_threads: int) -> dict:  # fmt: skip
    """Median seconds of one forward of ``kind`` at ``length`` tokens, and the process's peak
    resident bytes (run in a child process)."""
    batch = _inputs(length)
    if kind.startswith("onnxruntime"):
        from ..serving.sessions import cpu_session

        if kind == "onnxruntime-int8":
            path = str(Path(path).with_name(INT8_FILE))
        session = cpu_session(path, ort_threads)

        def forward():
            session.run(None, batch)
    else:
        served = _model(window, layers, max_length)
        tensors = {name: torch.from_numpy(value) for name, value in batch.items()}
        if kind == "hf":
            model, _ = export_longformer(Checkpoint.in_memory(served.model))
            model = model.eval()
            del served

            def forward():
                with torch.inference_mode():
                    model(**tensors)
        else:

            def forward():
                with torch.inference_mode():
                    served(*(tensors[name] for name in INPUTS))

    gc.collect()
    loaded = _reset_peak_rss()
    seconds = median_time(forward, "cpu", repeat=repeat, warmup=1)
    return {"ms": seconds * 1e3, "loaded_gib": loaded / 2**30, "forward_gib": (_status("VmHWM") - loaded) / 2**30}


def _status(field: str) -> int:
    """A byte count from ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak_rss() -> int:
    """Start the process's peak resident memory afresh (Linux: ``clear_refs`` 5), so that
    it measures what the forward adds to the loaded model, not the loading; the resident
    bytes now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def main(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    if args.led:
        if args.seq_lens == DEFAULT_LENGTHS:
            args.seq_lens = [4096, 16384]
        return led_main(args)
    max_length = max(args.seq_lens)
    path = args.out / "model.onnx"
    start = time.perf_counter()
    trace(_model(args.window, args.layers, max_length), max_length).save(str(path))
    export_s = time.perf_counter() - start
    print(f"exported a base-shaped QA model ({max_length} positions) in {export_s:.1f} s: {path}")
    shutil.copyfile(path, path.with_name(INT8_FILE))
    quantize_file(path.with_name(INT8_FILE))
    rows = {}
    jobs = [(length, kind) for length in args.seq_lens for kind in KINDS]
    for length, kind in tqdm(jobs, desc="bench onnx", unit="run"):
        rows.setdefault(str(length), {})[kind] = run_isolated(
            "longformer_fs.benchmarks.onnx:forward_measurement", args.threads, kind=kind, path=str(path), length=length,
            window=args.window, layers=args.layers, max_length=max_length, repeat=args.repeat,
            ort_threads=args.threads,
        )  # fmt: skip
    print(
        f"one forward, batch 1, one global token: {args.layers or 12} layers x 768, window {args.window} a side; "
        f"CPU, float32, {args.threads} thread(s); GiB: the peak resident memory the forward adds to the loaded model"
    )
    ratios = {"ort_over_ours": ("ORT/ours ms", "onnxruntime", "ours", "ms"),
              "ort_memory_over_ours": ("ORT/ours GiB", "onnxruntime", "ours", "forward_gib"),
              "int8_over_ours": ("int8/ours ms", "onnxruntime-int8", "ours", "ms"),
              "hf_over_ort": ("HF/ORT ms", "hf", "onnxruntime", "ms")}  # fmt: skip
    header = " ".join(f"{kind:>24}" for kind in KINDS) + "".join(f" {r[0]:>12}" for r in ratios.values())
    print(f"{'tokens':>7} {header}")
    for length, row in rows.items():
        cells = [
            f"{r['error'][:24]:>24}" if "error" in r else f"{r['ms']:>9.0f} ms {r['forward_gib']:>6.2f} GiB"
            for r in (row[kind] for kind in KINDS)
        ]
        if not any("error" in r for r in row.values()):
            row.update({key: row[over][field] / row[under][field] for key, (_, over, under, field) in ratios.items()})
        print(f"{length:>7} " + " ".join(cells) + "".join(f" {row[key]:>12.2f}" if key in row else f" {'':>12}"
                                                         for key in ratios))  # fmt: skip
    settings = {k: str(v) for k, v in vars(args).items() if not k.startswith("_")}
    write_results(args.out, {"export_s": export_s, "rows": rows, "settings": settings, "kinds": KINDS})
    return 0


# ---------------------------------------------------------------- an LED summarizing (--led)

LED_KINDS = {"onnxruntime": "onnxruntime (export-onnx's files, summarize-onnx's search)",
             "onnxruntime-int8": "onnxruntime, int8 linear layers", "ours": "summarize (fairseq's beam search)",
             "hf": "HF LEDForConditionalGeneration.generate"}  # fmt: skip


def led_settings(new_tokens: int):
    """Beam 4, length penalty 2.0, no repeated 3-gram (summarize's), exactly ``new_tokens`` tokens."""
    from ..serving.beam_search import GenerationSettings

    return GenerationSettings(beam=4, lenpen=2.0, no_repeat_ngram_size=3, min_len=new_tokens, max_len=new_tokens)


def summary_measurement(kind: str, directory: str, source_len: int, new_tokens: int, window: int,
                        layers: int | None, width: int | None, max_source: int) -> dict:  # fmt: skip
    """Seconds of one summary of a ``source_len``-token document by ``kind``, and the memory
    it adds to the loaded model (run in a child process)."""
    from .led import build, build_args, document

    settings = led_settings(new_tokens)
    source = document(source_len)
    if kind.startswith("onnxruntime"):
        from ..serving.summarizer import OnnxSummarizer

        summarizer = OnnxSummarizer(Path(directory) / ("int8" if kind.endswith("int8") else "float32"))

        def summarize():
            summarizer.generate(source[0].tolist(), settings)
    else:
        torch.manual_seed(0)
        model = build("led", max_source, 1024, window, layers, width).eval()
        if kind == "ours":
            from fairseq.tasks.translation import TranslationConfig, TranslationTask

            from ..evaluation.summarization import generate

            task = TranslationTask(TranslationConfig(), model.encoder.dictionary, model.decoder.dictionary)

            def summarize():
                generate(model, task, [source[0]], settings)
        else:
            from ..export.hf_led import export_led

            hf, _ = export_led(Checkpoint.in_memory(model, build_args("led", max_source, 1024, window, layers, width)))
            hf = hf.eval()
            del model
            glob = torch.zeros_like(source)
            glob[0, 0] = 1

            def summarize():
                with torch.inference_mode():
                    hf.generate(source, global_attention_mask=glob, num_beams=settings.beam, do_sample=False,
                                length_penalty=settings.lenpen, no_repeat_ngram_size=settings.no_repeat_ngram_size,
                                min_new_tokens=new_tokens, max_new_tokens=new_tokens)  # fmt: skip

    gc.collect()
    loaded = _reset_peak_rss()
    seconds = median_time(summarize, "cpu", repeat=1, warmup=0)
    return {"s": seconds, "loaded_gib": loaded / 2**30, "summary_gib": (_status("VmHWM") - loaded) / 2**30}


def export_led_files(out: Path, max_source: int, window: int, layers: int | None, width: int | None) -> float:
    """The benchmark's LED as ``out/float32`` and ``out/int8`` (export-onnx's files); seconds."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from ..export.onnx_led import generation_config, trace_led
    from .led import build

    torch.manual_seed(0)
    model = build("led", max_source, 1024, window, layers, width).eval()
    start = time.perf_counter()
    for name in ("float32", "int8"):
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        if name == "float32":
            trace_led(model, directory, max_source, DEFAULT_OPSET)
        else:
            for onnx_file in (out / "float32").glob("*.onnx"):
                shutil.copyfile(onnx_file, directory / onnx_file.name)
                quantize_file(directory / onnx_file.name)
        # The search reads ids only; the file is there because a served directory has one.
        Tokenizer(WordLevel({"<unk>": 3}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
        (directory / "generation_config.json").write_text(json.dumps(generation_config(model, led_settings(1))))
    return time.perf_counter() - start


def led_main(args: argparse.Namespace) -> int:
    max_source = max(args.seq_lens)
    export_s = export_led_files(args.out / "led", max_source, args.led_window, args.layers, args.width)
    print(f"exported an led_base-shaped LED ({max_source} source positions) in {export_s:.1f} s: {args.out / 'led'}")
    rows = {}
    jobs = [(length, kind) for length in args.seq_lens for kind in LED_KINDS]
    for length, kind in tqdm(jobs, desc="bench onnx --led", unit="run"):
        rows.setdefault(str(length), {})[kind] = run_isolated(
            "longformer_fs.benchmarks.onnx:summary_measurement", args.threads, kind=kind,
            directory=str(args.out / "led"), source_len=length, new_tokens=args.new_tokens, window=args.led_window,
            layers=args.layers, width=args.width, max_source=max_source,
        )  # fmt: skip
    print(
        f"one summary, beam 4, {args.new_tokens} new tokens, length penalty 2.0, no repeated 3-gram: led_base "
        f"shape ({args.layers or 6} + {args.layers or 6} layers), window {args.led_window} a side; CPU, float32, "
        f"{args.threads} thread(s); GiB: the peak resident memory the summary adds to the loaded model"
    )
    print(f"{'tokens':>7} " + " ".join(f"{kind:>22}" for kind in LED_KINDS))
    for length, row in rows.items():
        cells = [
            f"{r['error'][:22]:>22}" if "error" in r else f"{r['s']:>9.1f} s {r['summary_gib']:>6.2f} GiB"
            for r in (row[kind] for kind in LED_KINDS)
        ]
        print(f"{length:>7} " + " ".join(cells))
    settings = {k: str(v) for k, v in vars(args).items() if not k.startswith("_")}
    write_results(args.out / "led", {"export_s": export_s, "rows": rows, "settings": settings, "kinds": LED_KINDS})
    return 0
