"""``longformer-fs export-onnx``: a fine-tuned longformer_roberta checkpoint as one ONNX file, an LED as
the three files of a seq2seq model."""

from __future__ import annotations

import argparse
from pathlib import Path

from .options import print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..export.onnx_encoder import TOLERANCE
    from ..export.onnx_quantize import QUANTIZATIONS
    from ..export.onnx_trace import DEFAULT_OPSET, DTYPES

    parser.description = (
        "Write a longformer_roberta checkpoint (masked LM, classifier from sentence_prediction, or QA model "
        "from longformer_qa) as one ONNX file that serves every batch size, every length from 1 to the "
        "model's positions and every global pattern, with no T x T tensor in the graph. Inputs, int64 "
        "(batch, length), named as HF names them: input_ids, attention_mask (0 = padding), "
        "global_attention_mask (1 = global; the model's own global tokens, such as a classifier's <s>, "
        "are global too). Outputs: logits, or start_logits and end_logits. Before the file reaches OUT, "
        "onnxruntime runs it against PyTorch on random inputs of several lengths, global patterns and "
        "padding; a mismatch fails with the numbers and writes nothing. Serving needs onnxruntime and "
        "numpy only (docs/deploy.md). An led checkpoint becomes a directory in HF optimum's seq2seq layout "
        "(encoder_model.onnx, decoder_model.onnx, decoder_with_past_model.onnx, tokenizer.json, "
        "generation_config.json), checked by greedy summaries of two random sources that must equal "
        "PyTorch's token for token; `longformer-fs summarize-onnx OUT doc.pdf` summarizes "
        "with it, without torch."
    )
    parser.add_argument("checkpoint", type=Path, help="a longformer_roberta or led checkpoint (.pt)")
    parser.add_argument(
        "--out", type=Path, required=True, help="the ONNX file to write, e.g. model.onnx (a directory for an led)"
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="led only: where tokenizer.json comes from, an HF tokenizer directory or one holding GPT-2's "
        "encoder.json and vocab.bpe, mapped to the model's ids through its dict.txt (default: the "
        "checkpoint's directory, where import-hf leaves them; for a convert-bart output or a fine-tuned "
        "checkpoint, the directory of BART's encoder.json and vocab.bpe)",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="weights and activations of the graph (the attention's softmax runs in float32 either way); "
        f"the self-check allows {TOLERANCE['float32']:.0e} (float32) or {TOLERANCE['float16']:.0e} (float16) "
        "of the largest output",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default=None,
        help="store the linear layers' weights as int8 (onnxruntime's dynamic quantization: 2.5x smaller, "
        "often faster on CPUs: see docs/benchmarks.md); the self-check reports the agreement with the "
        "float32 file (top-1 of each output, or of an LED's greedy tokens)",
    )
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="the ONNX opset to write")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    from ..export.onnx import export_onnx

    report = export_onnx(args.checkpoint, args.out, args.dtype, args.opset, args.force, args.tokenizer, args.quantize)
    return print_report(report, args.json, _summary)


def _summary(report: dict):
    check = report["self_check"]
    weights = f"{report['dtype']}, int8 linear layers" if report["quantize"] else report["dtype"]
    yield (
        f"exported {report['checkpoint']} -> {report['output']} ({report['head']}, {weights}, "
        f"opset {report['opset']}, {report['megabytes']} MB, {report['export_seconds']} s)"
    )
    if "files" in report:  # an LED's directory
        yield f"  files: {', '.join(report['files'])} (tokenizer: {report['tokenizer']})"
        yield "  self-check: onnxruntime's greedy summaries = PyTorch's, token for token, for sources of " + ", ".join(
            f"{c['source_tokens']} tokens ({c['summary_tokens']} summary tokens)" for c in check["greedy"]
        )
    else:
        lengths = f"length 1 to {report['max_length']}"
        yield f"  inputs: {', '.join(report['onnx_inputs'])} (int64, [batch, length]; {lengths})"
        yield f"  outputs: {', '.join(report['onnx_outputs'])}"
        yield (
            f"  self-check: onnxruntime = PyTorch within {check['max_difference']:.1e} of the largest output "
            f"(tolerance {check['tolerance']:.0e}) at lengths {', '.join(map(str, check['lengths']))}, "
            f"global {'/'.join(check['patterns'])}, a padded batch of 2"
        )
    if "int8" in check:
        agreement = check["int8"]
        if "greedy_tokens" in agreement:
            yield f"  int8: {agreement['greedy_tokens']:.1%} of the greedy summary tokens as float32's"
        else:
            yield "  int8 against float32, same inputs: " + ", ".join(
                f"{name} top-1 {a['top1']:.1%}, largest difference {a['max_difference']:.1e}"
                for name, a in agreement.items()
            )
