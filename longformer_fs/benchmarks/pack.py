"""``longformer-fs bench pack``: what packing documents into rows buys continued MLM (issue #75).

One corpus of documents whose lengths are long-tailed (lognormal, ``--median`` tokens,
clipped at ``--seq-len``), binarized as ``fairseq-preprocess`` writes a corpus (a sentence a
line, an empty line between documents), trained three ways by ``longformer_masked_lm``, the
task and batching of ``recipes/mlm/longformer_base_4096.yaml`` (``--batch-size`` rows of
``--seq-len`` tokens, as its ``dataset.batch_size``):

- ``packed``: ``--pack-documents``: whole documents packed first-fit into full rows, each
  attended and numbered alone (the recipes' way);
- ``complete_doc``: one document a block (a long one split), padded to the batch's longest:
  the clean choice without packing (fairseq sorts rows by length, so a batch is bucketed);
- ``complete``: full blocks that run across documents (the recipes' before issue #75: the band
  attends across each boundary).

Each runs in its own process, with the same model, seed and optimizer, until it has trained
on ``--tokens`` real (not padded) tokens. Reported side by side: real tokens a second, the
share of padded positions, the peak memory of the largest batch's step, the rows whose band
runs across a document's end ("leaky"), and the masked-LM loss (bits a masked token) after
those tokens, on one held-out set of documents each scored alone, masked alike for all three.

The corpus's tokens follow a topic per document (a Zipf law over the topic's words), so a
document's own context predicts its masked tokens and another's misleads: the loss can show
what attending across documents costs.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from .. import devices
from ..recipes import RECIPES
from . import write_results
from .measure import add_device_arguments, autocast, peak_memory_bytes, run_isolated
from .recipe_training import add_training_arguments, training_of

MODES = ("packed", "complete_doc", "complete")
VOCAB = 2048  # the corpus's words
TOPICS = 32  # each document's words come from one topic's
TOPIC_WORDS = 256
SENTENCE = (8, 40)  # tokens a line, uniform
RECIPE = RECIPES / "mlm" / "longformer_base_4096.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-len", type=int, default=4096, help="tokens a row (the recipe's tokens_per_sample)")
    parser.add_argument("--window", type=int, default=256, help="one-sided attention window (the recipe's)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows a step (the recipe's dataset.batch_size)")
    parser.add_argument("--documents", type=int, default=600, help="training documents in the generated corpus")
    parser.add_argument("--valid-documents", type=int, default=40, help="held-out documents the loss is taken on")
    parser.add_argument("--median", type=float, default=600, help="median document length in tokens")
    parser.add_argument("--sigma", type=float, default=1.0, help="spread of the lognormal lengths (log scale)")
    parser.add_argument(
        "--tokens", type=int, default=524288, help="real tokens each way trains on before its loss is taken"
    )
    parser.add_argument(
        "--layers", type=int, default=2, help="encoder layers (longformer_roberta_base has 12; 2 fit a CPU's minutes)"
    )
    parser.add_argument("--width", type=int, default=256, help="model width (base: 768); heads of 64, FFN 4x")
    add_device_arguments(parser, precision=False)
    add_training_arguments(parser, RECIPE)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, default=Path("bench_out/pack"), help="directory for results.json")


# ------------------------------------------------------------------ the corpus


def document_lengths(count: int, median: float, sigma: float, limit: int, seed: int) -> np.ndarray:
    """``(count,)`` long: lognormal lengths of the given median, clipped to ``[2, limit]``."""
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(math.log(median), sigma, count)), 2, limit).astype(np.int64)


def corpus(folder: Path, documents: int, valid_documents: int, median: float, sigma: float, limit: int) -> np.ndarray:
    """The bench's corpus written to ``folder`` (:func:`write_corpus`): ``documents`` training
    and ``valid_documents`` held-out lengths drawn by :func:`document_lengths`; returns the
    training lengths."""
    lengths = {
        "train": document_lengths(documents, median, sigma, limit, seed=0),
        "valid": document_lengths(valid_documents, median, sigma, limit, seed=1),
    }
    write_corpus(folder, lengths)
    return lengths["train"]


def write_corpus(folder: Path, lengths: dict[str, np.ndarray], seed: int = 0) -> None:
    """``folder/{dict.txt, SPLIT.bin, SPLIT.idx}`` as ``fairseq-preprocess`` writes them: each
    document's lines, each line's tokens then ``</s>``, and an empty line (``</s>`` alone)
    after every document, which ``complete_doc`` reads as the boundary.

    Args:
        lengths: split name -> its documents' lengths in tokens (a line's ``</s>`` counted).
    """
    from fairseq.data import Dictionary, indexed_dataset

    rng = np.random.default_rng(seed)
    dictionary = Dictionary()
    for word in range(VOCAB):
        dictionary.add_symbol(f"w{word}", n=VOCAB - word)
    folder.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(folder / "dict.txt"))
    first = dictionary.nspecial
    topics = [rng.choice(VOCAB, TOPIC_WORDS, replace=False) for _ in range(TOPICS)]
    zipf = 1.0 / np.arange(1, TOPIC_WORDS + 1)
    zipf /= zipf.sum()
    eos = torch.tensor([dictionary.eos()], dtype=torch.int32)
    for split, sizes in lengths.items():
        builder = indexed_dataset.make_builder(str(folder / f"{split}.bin"), impl="mmap", vocab_size=len(dictionary))
        for length in sizes.tolist():
            words = topics[rng.integers(TOPICS)]
            left = length
            while left > 0:
                line = min(left, int(rng.integers(*SENTENCE)))
                tokens = first + words[rng.choice(TOPIC_WORDS, line - 1, p=zipf)] if line > 1 else np.empty(0)
                builder.add_item(torch.cat([torch.as_tensor(tokens, dtype=torch.int32), eos]))
                left -= line
            builder.add_item(eos)  # the empty line that ends a document
        builder.finalize(str(folder / f"{split}.idx"))


# ------------------------------------------------------------------ one way, in its own process


def _task(data: str, seq_len: int, mode: str):
    import longformer_fs.tasks  # noqa: F401 (registers longformer_masked_lm)
    from longformer_fs.tasks.masked_lm import LongformerMaskedLMConfig, LongformerMaskedLMTask

    cfg = LongformerMaskedLMConfig(
        data=data, tokens_per_sample=seq_len, sample_break_mode="complete" if mode == "complete" else "complete_doc",
        pack_documents=mode == "packed", seed=1,
    )  # fmt: skip
    return LongformerMaskedLMTask.setup_task(cfg)


def _batches(task, split: str, batch_size: int, epoch: int, shuffle: bool):
    task.load_dataset(split, epoch=epoch)
    dataset = task.dataset(split)
    iterator = task.get_batch_iterator(
        dataset, max_sentences=batch_size, max_positions=task.cfg.tokens_per_sample, seed=1, epoch=epoch,
        required_batch_size_multiple=1,
    )  # fmt: skip
    return iterator.next_epoch_itr(shuffle=shuffle)


def _to(sample: dict, device: str) -> dict:
    from fairseq import utils

    return utils.apply_to_sample(lambda t: t.to(device), sample)


def train_measurement(
    mode: str, data: str, seq_len: int, window: int, batch_size: int, tokens: int, layers: int, width: int,
    device: str, precision: str = "fp32", dropout: float = 0.0, attention_dropout: float = 0.0,
    checkpoint_activations: bool = False, compile_layers: bool = False,
) -> dict:  # fmt: skip
    """Train one way (``mode``) until ``tokens`` real tokens, then score the held-out set;
    run in a child process by ``bench pack``, in the report's process by its ``pack`` part.
    ``precision``: the forward autocasts to it (the weights and Adam stay float32); the
    other settings are the model's (:class:`~.recipe_training.Training`'s).

    Returns:
        ``tokens_per_s`` (real tokens over the timed steps' seconds, the first step untimed),
        ``padded_share``, ``mixed_rows`` (rows whose band runs across a document's end:
        ``complete``'s), ``peak_mib`` (the largest batch's step), ``valid_bits``
        (masked-LM loss, bits a masked token), ``steps``, ``real_tokens`` and the backends the
        band attention ran on.
    """
    from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

    from ..attention.calls import backend_calls
    from ..models.longformer_roberta import LongformerRobertaModel

    torch.manual_seed(1)
    task = _task(data, seq_len, mode)
    args = types.SimpleNamespace(
        max_positions=seq_len, attention_window=str(window), dropout=dropout, attention_dropout=attention_dropout,
        checkpoint_activations=checkpoint_activations, compile_layers=compile_layers, encoder_layers=layers,
        encoder_embed_dim=width, encoder_ffn_embed_dim=4 * width,
        encoder_attention_heads=max(1, width // 64),
    )  # fmt: skip
    model = LongformerRobertaModel.build_model(args, task).to(device).train()
    criterion = MaskedLmLoss(MaskedLmConfig(), task)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    pad = task.source_dictionary.pad()

    def step(sample) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss, sample_size, _ = criterion(model, sample)
        (loss.float() / sample_size).backward()
        optimizer.step()

    seen = padded = positions = mixed = rows = steps = 0
    seconds = timed_tokens = 0.0
    largest, epoch = None, 1
    with backend_calls() as counts:
        while seen < tokens:
            for sample in _batches(task, "train", batch_size, epoch, shuffle=True):
                # The batch's counts from its host copy, before it moves: no step reads back.
                src, real = sample["net_input"]["src_tokens"], int(sample["ntokens"])
                padded, positions = padded + int(src.eq(pad).sum()), positions + src.numel()
                rows, mixed = rows + src.shape[0], mixed + _rows_mixing_documents(src, task)
                sample = _to(sample, device)
                if largest is None or src.numel() > largest["net_input"]["src_tokens"].numel():
                    largest = sample
                start = time.perf_counter()
                step(sample)
                devices.synchronize(device)
                if steps:  # the first step warms the allocator and the caches
                    seconds += time.perf_counter() - start
                    timed_tokens += real
                steps, seen = steps + 1, seen + real
                if seen >= tokens:
                    break
            epoch += 1
    peak = peak_memory_bytes(lambda: step(largest), device)
    return {
        "tokens_per_s": timed_tokens / seconds if seconds else None,
        "padded_share": padded / positions,
        "mixed_rows": mixed / rows,
        "peak_mib": peak / 2**20,
        "valid_bits": _valid_bits(model, criterion, data, seq_len, batch_size, device),
        "steps": steps,
        "real_tokens": seen,
        "backends": dict(counts),
    }


def _rows_mixing_documents(src: torch.Tensor, task) -> int:
    """Rows whose tokens run across a document's end unannounced: an ``</s>`` ``</s>`` pair
    (a line's end, then the empty line) before the row's last real token."""
    eos, pad = task.source_dictionary.eos(), task.source_dictionary.pad()
    ends = src[:, :-1].eq(eos) & src[:, 1:].eq(eos)
    real = src.ne(pad)
    last = real.long().cumsum(1).argmax(1, keepdim=True)  # each row's last real token
    inside = torch.arange(src.shape[1] - 1, device=src.device)[None] < last - 1
    return int((ends & inside).any(1).sum())


def _valid_bits(model, criterion, data: str, seq_len: int, batch_size: int, device: str) -> float | None:
    """Masked-LM loss in bits a masked token on the ``valid`` split, one document a block
    (``complete_doc``, unpacked): the same blocks and masks whichever way the model trained.
    Summed on the device and read once (None in a rehearsal, whose tensors hold no values)."""
    task = _task(data, seq_len, "complete_doc")
    model.eval()
    loss, size = torch.zeros((), device=device), 0
    with torch.no_grad():
        for sample in _batches(task, "valid", batch_size, 1, shuffle=False):
            size += int(sample["target"].ne(task.source_dictionary.pad()).sum())  # the host copy's
            value, _, _ = criterion(model, _to(sample, device))
            loss = loss + value.detach().float()
    model.train()
    return None if devices.rehearsing(device) else float(loss) / size / math.log(2)


# ------------------------------------------------------------------ the command


def ratios(results: dict) -> dict:
    """Packed rows against the other two ways: real tokens/s and peak memory (empty when a
    way failed; a ratio None where its denominator is nothing, as in a rehearsal's memory)."""
    if any("error" in row for row in results.values()):
        return {}
    packed, complete_doc, complete = (results[mode] for mode in MODES)

    def ratio(key: str, other: dict) -> float | None:
        return packed[key] / other[key] if packed[key] is not None and other[key] else None

    return {
        "speed_vs_complete_doc": ratio("tokens_per_s", complete_doc),
        "speed_vs_complete": ratio("tokens_per_s", complete),
        "memory_vs_complete": ratio("peak_mib", complete),
    }


def main(args: argparse.Namespace) -> int:
    training = training_of(args, RECIPE)
    if args.median < 2 or args.documents < 1 or args.valid_documents < 1 or args.tokens < 1:
        print("error: --median must be at least 2, --documents, --valid-documents and --tokens at least 1")
        return 2
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as data:
        train = corpus(Path(data), args.documents, args.valid_documents, args.median, args.sigma, args.seq_len)
        for mode in tqdm(MODES, desc="bench pack", unit="way"):
            results[mode] = run_isolated(
                "longformer_fs.benchmarks.pack:train_measurement", args.threads, mode=mode, data=data,
                seq_len=args.seq_len, window=args.window, batch_size=args.batch_size, tokens=args.tokens,
                layers=args.layers, width=args.width, device=args.device, precision=training.precision,
                dropout=training.dropout, attention_dropout=training.attention_dropout,
                checkpoint_activations=training.checkpoint_activations, compile_layers=training.compile_layers,
            )  # fmt: skip
    print(
        f"continued MLM, {args.layers} layers x {args.width}, window {args.window} per side, {args.batch_size} rows of "
        f"{args.seq_len} tokens a step, as the MLM recipe batches; {args.documents} documents, lengths lognormal "
        f"(median {int(np.median(train))}, mean {train.mean():.0f}, {(train == args.seq_len).mean():.1%} clipped at "
        f"{args.seq_len}); {args.tokens} real tokens each; {args.device}, {args.threads} thread(s); "
        f"{training.describe()}"
    )
    print(
        f"{'rows':<14} {'real tok/s':>10} {'padded':>7} {'leaky rows':>10} {'peak MiB':>9} {'valid bits':>10}  backends"
    )
    for mode, row in results.items():
        if "error" in row:
            print(f"{mode:<14} {row['error'][:100]}")
            continue
        backends = ", ".join(f"{name} x {calls}" for name, calls in row["backends"].items())
        print(
            f"{mode:<14} {row['tokens_per_s']:>10.0f} {row['padded_share']:>7.1%} {row['mixed_rows']:>10.1%} "
            f"{row['peak_mib']:>9.0f} {row['valid_bits']:>10.3f}  {backends}"
        )
    summary = {
        "rows": results,
        "settings": {k: str(v) for k, v in vars(args).items() if k != "func"},
        "training": training.figures(),
        **ratios(results),
    }
    if summary.get("speed_vs_complete") and summary.get("memory_vs_complete"):
        print(
            f"packed: {summary['speed_vs_complete_doc']:.2f}x complete_doc's real tokens/s (target >= 1.4), "
            f"{summary['speed_vs_complete']:.2f}x complete's (target >= 0.95), "
            f"{summary['memory_vs_complete']:.2f}x its peak memory"
        )
    write_results(args.out, summary)
    return 0
