"""``longformer-fs bench finetune``: one QA training step of ours against HF transformers.

Both sides are ``longformer_roberta_base``'s shape (12 layers, width 768, 12 heads, window
256 per side) on one sequence of ``--seq-len`` tokens whose first ``--global-tokens``
tokens (``<s>`` question ``</s>``) attend globally, the paper's TriviaQA setting. HF's
``LongformerForQuestionAnswering`` gets our weights through the ``export-hf`` mapping, so
the two compute the same function (the export tests check that to 1e-5); the step is
forward, start/end cross-entropy and backward. Every measurement runs in its own process,
so one that outgrows the memory is a result ("killed") rather than the end of the run.

Both train as ``recipes/finetune/triviaqa.yaml`` does unless flags say otherwise: its
dropout and attention dropout, its activation checkpointing, and its precision (fp16 on
CUDA; float32 without CUDA): ours as fairseq's ``--fp16`` runs it (the model cast to
half), HF's as its ``Trainer(fp16=True)`` does (autocast, float32 weights). Our model is
built with ``--max-global-tokens`` equal to ``--global-tokens``, as the recipe bounds the
global tokens of a row, so its step reads nothing back from the device, and with its
layers ``torch.compile``d on CUDA (``--compile-layers``; eager elsewhere); HF's runs as
its own code does. Each result names the attention backend of every band-attention call
and the kernels HF's step ran.
"""

from __future__ import annotations

import argparse
import types
from pathlib import Path

import torch
from fairseq.data import Dictionary
from tqdm import tqdm

from ..checkpoint import Checkpoint
from ..conventions import BOS, EOS, PAD
from ..export.hf import export_longformer
from ..heads import QA_HEAD
from ..models.longformer_roberta import LongformerRobertaModel
from ..recipes import RECIPES
from ..tasks.qa import QaTask
from . import write_results
from .measure import add_device_arguments, autocast, cast_as_fairseq, run_isolated
from .recipe_training import add_training_arguments, training_of, warmup_steps
from .step_profile import add_saved_tensors_argument, attention_summary, measure_step

VOCAB = 50265  # RoBERTa's dictionary, <mask> included
KINDS = ("ours", "hf")
RECIPE = RECIPES / "finetune" / "triviaqa.yaml"  # the training both models get


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence")
    parser.add_argument("--global-tokens", type=int, default=64, help="leading tokens with global attention")
    parser.add_argument("--window", type=int, default=256, help="one-sided window (HF's attention_window is twice)")
    parser.add_argument("--layers", type=int, default=None, help="override the depth (default: base, 12)")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences per step")
    add_device_arguments(parser, precision=False)
    add_training_arguments(parser, "recipes/finetune/triviaqa.yaml")
    add_saved_tensors_argument(parser)
    parser.add_argument("--repeat", type=int, default=3, help="timed steps per measurement (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, default=Path("bench_out/finetune"), help="directory for results.json")


def build_ours(
    window: int, layers: int | None, seq_len: int, dropout: float = 0.0, attention_dropout: float = 0.0,
    checkpoint_activations: bool = False, max_global_tokens: int | None = None, compile_layers: bool = False,
) -> LongformerRobertaModel:  # fmt: skip
    """An untrained ``longformer_roberta_base`` with a start/end token head (with
    ``max_global_tokens``, a bound on each row's global tokens: none is read back; with
    ``compile_layers``, its layers compile in training)."""
    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(str(i))
    args = argparse.Namespace(
        max_positions=seq_len, attention_window=str(window), dropout=dropout, attention_dropout=attention_dropout,
        checkpoint_activations=checkpoint_activations, max_global_tokens=max_global_tokens,
        compile_layers=compile_layers,
    )  # fmt: skip
    if layers:
        args.encoder_layers = layers
    model = LongformerRobertaModel.build_model(args, types.SimpleNamespace(source_dictionary=dictionary))
    model.register_token_head(QA_HEAD, 2)
    return model


def step_measurement(
    kind: str, seq_len: int, global_tokens: int, window: int, layers: int | None, batch_size: int,
    device: str, precision: str, repeat: int, dropout: float = 0.0, attention_dropout: float = 0.0,
    checkpoint_activations: bool = False, saved_tensors: bool = False, compile_layers: bool = False,
) -> dict:  # fmt: skip
    """One QA training step of ``kind`` (``ours`` or ``hf``) in ``precision``, with these
    dropouts and, for ours, compiled layers when ``compile_layers`` (HF's never); run in a
    child process by ``bench finetune``.

    Returns:
        :func:`~.step_profile.measure_step`'s figures (seconds, peak memory, the attention
        backends and kernels, the step's profile) and ``tokens_per_s``.
    """
    torch.manual_seed(0)
    compile_layers = compile_layers and kind == "ours"
    ours = build_ours(window, layers, seq_len, dropout, attention_dropout, checkpoint_activations, global_tokens,
                      compile_layers)  # fmt: skip
    if kind == "hf":
        model, _ = export_longformer(Checkpoint.in_memory(ours))
        del ours
        model = model.to(device).train()
        if checkpoint_activations:
            model.gradient_checkpointing_enable()
        forward_precision = precision  # HF's Trainer(fp16=True): autocast over float32 weights
    else:
        model = cast_as_fairseq(ours.to(device), precision).train()
        forward_precision = "fp32"  # fairseq's --fp16: the model itself is half
    tokens = torch.randint(4, VOCAB - 1, (batch_size, seq_len), device=device)
    tokens[:, 0], tokens[:, global_tokens - 1], tokens[:, -1] = BOS, EOS, EOS
    question = torch.zeros_like(tokens, dtype=torch.bool)
    question[:, :global_tokens] = True
    gold = torch.randint(global_tokens, seq_len - 1, (2, batch_size), device=device)

    def logits():
        if kind == "hf":
            out = model(input_ids=tokens, attention_mask=(tokens != PAD).long(), global_attention_mask=question.long())
            return out.start_logits, out.end_logits
        both = QaTask.model_outputs(model, {"net_input": {"src_tokens": tokens, "global_attention_mask": question}})
        return both[..., 0], both[..., 1]

    def step():
        model.zero_grad(set_to_none=True)
        with autocast(device, forward_precision):
            start, end = logits()
            loss = torch.nn.functional.cross_entropy(start.float(), gold[0])
            loss = loss + torch.nn.functional.cross_entropy(end.float(), gold[1])
        loss.backward()

    # One warm-up step; with compiled layers on GPU two: a shape's first two steps compile the
    # layers (static, then dynamic), and timing starts after them (warmup_steps).
    figures = measure_step(step, model, device, repeat, warmup_steps(device, compile_layers, 1), saved_tensors)
    return {"step_s": figures["step_s"], "tokens_per_s": batch_size * seq_len / figures["step_s"], **figures}


def main(args: argparse.Namespace) -> int:
    training = training_of(args, RECIPE)
    if not 0 < args.global_tokens < args.seq_len:
        print(f"error: --global-tokens must be in [1, {args.seq_len}), got {args.global_tokens}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for kind in tqdm(KINDS, desc="bench finetune", unit="model"):
        results[kind] = run_isolated("longformer_fs.benchmarks.finetune:step_measurement", args.threads, kind=kind,
                                     seq_len=args.seq_len, global_tokens=args.global_tokens, window=args.window,
                                     layers=args.layers, batch_size=args.batch_size, device=args.device,
                                     precision=training.precision, repeat=args.repeat, dropout=training.dropout,
                                     attention_dropout=training.attention_dropout,
                                     checkpoint_activations=training.checkpoint_activations,
                                     saved_tensors=args.saved_tensors,
                                     compile_layers=training.compile_layers)  # fmt: skip
    ours, hf = results["ours"], results["hf"]
    layers = args.layers or 12
    print(
        f"one QA training step (forward, start/end loss, backward): {layers} layers x 768, window {args.window} "
        f"per side, {args.batch_size} x {args.seq_len} tokens, {args.global_tokens} global; {args.device}, "
        f"{args.threads} thread(s); both in {training.describe()}"
        + ("; our layers compiled, HF's eager" if training.compile_layers else "")
    )
    print(f"{'model':<44} {'step s':>8} {'tok/s':>8} {'peak GiB':>9}")
    names = {"ours": "ours (longformer_roberta_base)", "hf": "HF LongformerForQuestionAnswering"}
    for kind, result in results.items():
        if "error" in result:
            print(f"{names[kind]:<44} {result['error'][:60]}")
        else:
            print(
                f"{names[kind]:<44} {result['step_s']:>8.3f} {result['tokens_per_s']:>8.0f} {result['peak_gib']:>9.2f}"
            )
    print("attention each step ran (band attention: backend (kind of call) x calls; SDPA: the kernel that ran):")
    for kind, result in results.items():
        print(f"{names[kind]:<44} {attention_summary(result)}")
    summary = {
        "rows": results,
        "settings": {k: str(v) for k, v in vars(args).items() if k != "func"},
        "training": training.figures(),
    }
    if "error" not in ours and "error" not in hf:
        summary["speedup"] = hf["step_s"] / ours["step_s"]
        summary["memory_ratio"] = ours["peak_gib"] / hf["peak_gib"]
        print(
            f"speedup (HF time / ours) {summary['speedup']:.2f}x (target >= 2); "
            f"memory (ours / HF) {summary['memory_ratio']:.2f} (target <= 1)"
        )
    write_results(args.out, summary)
    return 0
