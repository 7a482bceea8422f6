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

``--parts finetune`` does the same for classification fine-tuning, on documents drawn alike
and labelled by their topic, trained by ``longformer_sentence_prediction`` with the settings
of ``recipes/finetune/imdb.yaml`` (``--batch-size`` rows a step, ``<s>`` global), three ways:

- ``fairseq``: fairseq's ``sentence_prediction`` batches: shuffled without regard to length,
  each row one document padded to the batch's longest;
- ``bucketed``: the same rows in batches of like lengths (sorted by length, the batches
  shuffled), as a length-bucketing sampler makes them: what bucketing alone saves;
- ``packed``: ``--pack``: whole documents packed first-fit into rows of ``--seq-len``.

Reported: real tokens and documents a second, the padded share and the peak memory.
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
FINETUNE_MODES = ("packed", "bucketed", "fairseq")
PARTS = ("mlm", "finetune")
VOCAB = 2048  # the corpus's words
TOPICS = 32  # each document's words come from one topic's
TOPIC_WORDS = 256
SENTENCE = (8, 40)  # tokens a line, uniform
RECIPE = RECIPES / "mlm" / "longformer_base_4096.yaml"
FINETUNE_RECIPE = RECIPES / "finetune" / "imdb.yaml"


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
        "--parts", default=",".join(PARTS),
        help=f"what to measure, comma-separated: {', '.join(PARTS)} (continued MLM; classification fine-tuning)",
    )  # fmt: skip
    parser.add_argument(
        "--finetune-tokens", type=int, default=262144, help="real tokens each fine-tuning way trains on"
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


def _topic_documents(lengths: dict[str, np.ndarray], seed: int):
    """The bench's vocabulary (a ``Dictionary`` of ``VOCAB`` words) and, per split, its
    documents: ``documents(split)`` yields ``(topic, lines)``, each line an int32 tensor of
    its words then ``</s>``, the lines' lengths summing to the document's (``</s>`` counted)."""
    from fairseq.data import Dictionary

    rng = np.random.default_rng(seed)
    dictionary = Dictionary()
    for word in range(VOCAB):
        dictionary.add_symbol(f"w{word}", n=VOCAB - word)
    first = dictionary.nspecial
    topics = [rng.choice(VOCAB, TOPIC_WORDS, replace=False) for _ in range(TOPICS)]
    zipf = 1.0 / np.arange(1, TOPIC_WORDS + 1)
    zipf /= zipf.sum()
    eos = torch.tensor([dictionary.eos()], dtype=torch.int32)

    def documents(split: str):
        for length in lengths[split].tolist():
            topic = int(rng.integers(TOPICS))
            words, left, lines = topics[topic], length, []
            while left > 0:
                line = min(left, int(rng.integers(*SENTENCE)))
                tokens = first + words[rng.choice(TOPIC_WORDS, line - 1, p=zipf)] if line > 1 else np.empty(0)
                lines.append(torch.cat([torch.as_tensor(tokens, dtype=torch.int32), eos]))
                left -= line
            yield topic, lines

    return dictionary, documents


def classification_corpus(folder: Path, documents: int, median: float, sigma: float, limit: int) -> None:
    """The fine-tuning part's corpus written to ``folder`` (:func:`write_classification`):
    ``documents`` lengths drawn by :func:`document_lengths`, each at most ``limit`` tokens
    (a row's, less the ``<s>`` the task prepends)."""
    write_classification(folder, {"train": document_lengths(documents, median, sigma, limit, seed=2)})


def write_corpus(folder: Path, lengths: dict[str, np.ndarray], seed: int = 0) -> None:
    """``folder/{dict.txt, SPLIT.bin, SPLIT.idx}`` as ``fairseq-preprocess`` writes them: each
    document's lines, each line's tokens then ``</s>``, and an empty line (``</s>`` alone)
    after every document, which ``complete_doc`` reads as the boundary.

    Args:
        lengths: split name -> its documents' lengths in tokens (a line's ``</s>`` counted).
    """
    from fairseq.data import indexed_dataset

    dictionary, documents = _topic_documents(lengths, seed)
    folder.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(folder / "dict.txt"))
    eos = torch.tensor([dictionary.eos()], dtype=torch.int32)
    for split in lengths:
        builder = indexed_dataset.make_builder(str(folder / f"{split}.bin"), impl="mmap", vocab_size=len(dictionary))
        for _, lines in documents(split):
            for line in lines:
                builder.add_item(line)
            builder.add_item(eos)  # the empty line that ends a document
        builder.finalize(str(folder / f"{split}.idx"))


def write_classification(folder: Path, lengths: dict[str, np.ndarray], seed: int = 0) -> None:
    """``folder/{input0,label}/`` as ``fairseq-preprocess`` writes a classification set
    (``sentence_prediction``'s layout): each document one line, its words then ``</s>``,
    labelled by its topic's parity, which its words tell."""
    from fairseq.data import Dictionary, indexed_dataset

    dictionary, documents = _topic_documents(lengths, seed)
    labels = Dictionary()
    for label in ("0", "1"):
        labels.add_symbol(label)
    vocabularies = {"input0": dictionary, "label": labels}
    for name, vocabulary in vocabularies.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        vocabulary.save(str(folder / name / "dict.txt"))
    for split in lengths:
        builders = {
            name: indexed_dataset.make_builder(str(folder / name / f"{split}.bin"), impl="mmap", vocab_size=len(v))
            for name, v in vocabularies.items()
        }
        for topic, lines in documents(split):
            words = torch.cat([line[:-1] for line in lines] + [lines[-1][-1:]])  # one line: a single </s>
            builders["input0"].add_item(words)
            builders["label"].add_item(torch.tensor([labels.index(str(topic % 2)), labels.eos()], dtype=torch.int32))
        for name, builder in builders.items():
            builder.finalize(str(folder / name / f"{split}.idx"))


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
    """``split`` loaded for ``epoch`` (its masks drawn anew), then :func:`_epoch_batches`."""
    task.load_dataset(split, epoch=epoch)
    return _epoch_batches(task, task.dataset(split), batch_size, epoch, shuffle)


def _epoch_batches(task, dataset, batch_size: int, epoch: int, shuffle: bool):
    """``dataset``'s batches of ``batch_size`` rows for ``epoch``, as fairseq-train makes them."""
    iterator = task.get_batch_iterator(
        dataset, max_sentences=batch_size, max_positions=task.max_positions(), seed=1, epoch=epoch,
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

    from ..models.longformer_roberta import LongformerRobertaModel

    torch.manual_seed(1)
    task = _task(data, seq_len, mode)
    args = _model_args(seq_len, window, layers, width, dropout, attention_dropout, checkpoint_activations,
                       compile_layers)  # fmt: skip
    model = LongformerRobertaModel.build_model(args, task).to(device).train()
    criterion = MaskedLmLoss(MaskedLmConfig(), task)
    mixed = [0]

    def count(src: torch.Tensor) -> None:
        mixed[0] += _rows_mixing_documents(src, task)

    result = _timed_training(
        model, criterion, lambda epoch: _batches(task, "train", batch_size, epoch, shuffle=True), tokens, device,
        precision, task.source_dictionary.pad(), count,
    )  # fmt: skip
    rows = result.pop("rows")
    return {
        **result,
        "mixed_rows": mixed[0] / rows,
        "valid_bits": _valid_bits(model, criterion, data, seq_len, batch_size, device),
    }


def _model_args(seq_len, window, layers, width, dropout, attention_dropout, checkpoint_activations, compile_layers,
                **more) -> types.SimpleNamespace:  # fmt: skip
    """``longformer_roberta``'s settings for a bench model: ``layers`` x ``width``, heads of 64."""
    return types.SimpleNamespace(
        max_positions=seq_len, attention_window=str(window), dropout=dropout, attention_dropout=attention_dropout,
        checkpoint_activations=checkpoint_activations, compile_layers=compile_layers, encoder_layers=layers,
        encoder_embed_dim=width, encoder_ffn_embed_dim=4 * width, encoder_attention_heads=max(1, width // 64), **more,
    )  # fmt: skip


def _timed_training(model, criterion, epochs, tokens: int, device: str, precision: str, pad: int, count=None) -> dict:
    """Adam steps of ``criterion`` on ``epochs(1)``, ``epochs(2)``, ... until ``tokens`` real
    tokens, each batch's counts taken from its host copy before it moves (no step reads back).

    Args:
        count: called with each batch's host ``src_tokens``, for a caller's own counts.

    Returns:
        ``tokens_per_s`` and ``documents_per_s`` (over the timed steps' seconds, the first step
        untimed), ``padded_share``, ``peak_mib`` (the largest batch's step), ``steps``,
        ``real_tokens``, ``rows`` and the backends the band attention ran on.
    """
    from ..attention.calls import backend_calls

    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)

    def step(sample) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss, sample_size, _ = criterion(model, sample)
        (loss.float() / sample_size).backward()
        optimizer.step()

    seen = padded = positions = rows = steps = 0
    seconds = timed_tokens = timed_documents = 0.0
    largest, epoch = None, 1
    with backend_calls() as counts:
        while seen < tokens:
            for sample in epochs(epoch):
                src, real = sample["net_input"]["src_tokens"], int(sample["ntokens"])
                padded, positions, rows = padded + int(src.eq(pad).sum()), positions + src.numel(), rows + src.shape[0]
                if count is not None:
                    count(src)
                sample = _to(sample, device)
                if largest is None or src.numel() > largest["net_input"]["src_tokens"].numel():
                    largest = sample
                start = time.perf_counter()
                step(sample)
                devices.synchronize(device)
                if steps:  # the first step warms the allocator and the caches
                    seconds += time.perf_counter() - start
                    timed_tokens, timed_documents = timed_tokens + real, timed_documents + int(sample["nsentences"])
                steps, seen = steps + 1, seen + real
                if seen >= tokens:
                    break
            epoch += 1
    peak = peak_memory_bytes(lambda: step(largest), device)
    return {
        "tokens_per_s": timed_tokens / seconds if seconds else None,
        "documents_per_s": timed_documents / seconds if seconds else None,
        "padded_share": padded / positions,
        "peak_mib": peak / 2**20,
        "steps": steps,
        "real_tokens": seen,
        "rows": rows,
        "backends": dict(counts),
    }


def finetune_measurement(
    mode: str, data: str, seq_len: int, window: int, batch_size: int, tokens: int, layers: int, width: int,
    device: str, precision: str = "fp32", dropout: float = 0.0, attention_dropout: float = 0.0,
    checkpoint_activations: bool = False, compile_layers: bool = False,
) -> dict:  # fmt: skip
    """Fine-tune a classifier one way (``mode``, :data:`FINETUNE_MODES`) on ``data``
    (:func:`write_classification`) until ``tokens`` real tokens, as ``train_measurement``
    trains MLM: :func:`_timed_training`'s figures."""
    from fairseq.criterions.sentence_prediction import SentencePredictionConfig, SentencePredictionCriterion
    from fairseq.data import SortDataset

    from ..models.longformer_roberta import LongformerRobertaModel
    from ..tasks.sentence_prediction import LongformerSentencePredictionConfig, LongformerSentencePredictionTask

    torch.manual_seed(1)
    cfg = LongformerSentencePredictionConfig(
        data=data, num_classes=2, init_token=0, separator_token=2, shorten_method="truncate", max_positions=seq_len,
        pack=mode == "packed", regression_target=False, seed=1,
    )  # fmt: skip
    task = LongformerSentencePredictionTask.setup_task(cfg)
    task.load_dataset("train")
    if mode == "bucketed":  # fairseq's shuffled rows, then sorted by length: batches of like rows
        shuffled = task.datasets["train"]
        lengths = shuffled.dataset.sizes[0]
        task.datasets["train"] = SortDataset(shuffled.dataset, sort_order=[shuffled.sort_order[0], lengths])
    args = _model_args(seq_len, window, layers, width, dropout, attention_dropout, checkpoint_activations,
                       compile_layers, global_attention_tokens="<s>", max_global_tokens=1)  # fmt: skip
    model = LongformerRobertaModel.build_model(args, task)
    model.register_classification_head("sentence_classification_head", num_classes=2)
    model = model.to(device).train()
    criterion = SentencePredictionCriterion(SentencePredictionConfig(), task)

    def epochs(epoch: int):
        return _epoch_batches(task, task.dataset("train"), batch_size, epoch, shuffle=True)

    result = _timed_training(model, criterion, epochs, tokens, device, precision, task.source_dictionary.pad())
    result.pop("rows")
    return result


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


def _ratio(key: str, one: dict, other: dict) -> float | None:
    """``one[key] / other[key]``, or None where either is nothing (a rehearsal's memory)."""
    return one[key] / other[key] if one[key] is not None and other[key] else None


def ratios(results: dict) -> dict:
    """Packed rows against the other two ways: real tokens/s and peak memory (empty when a
    way failed; a ratio None where its denominator is nothing, as in a rehearsal's memory)."""
    if any("error" in row for row in results.values()):
        return {}
    packed, complete_doc, complete = (results[mode] for mode in MODES)
    return {
        "speed_vs_complete_doc": _ratio("tokens_per_s", packed, complete_doc),
        "speed_vs_complete": _ratio("tokens_per_s", packed, complete),
        "memory_vs_complete": _ratio("peak_mib", packed, complete),
    }


def finetune_ratios(results: dict) -> dict:
    """Packed rows and bucketed batches against fairseq's shuffled ones, and packed against
    bucketed: real tokens/s and peak memory (empty when a way failed)."""
    if any("error" in row for row in results.values()):
        return {}
    packed, bucketed, fairseq = (results[mode] for mode in FINETUNE_MODES)
    return {
        "bucketed_speed_vs_fairseq": _ratio("tokens_per_s", bucketed, fairseq),
        "packed_speed_vs_fairseq": _ratio("tokens_per_s", packed, fairseq),
        "packed_speed_vs_bucketed": _ratio("tokens_per_s", packed, bucketed),
        "packed_memory_vs_fairseq": _ratio("peak_mib", packed, fairseq),
    }


def _measure(target: str, modes: tuple[str, ...], desc: str, args, training, data: str, tokens: int) -> dict:
    """Each way of ``modes`` measured by ``target`` in its own process: ``{mode: figures}``."""
    results = {}
    for mode in tqdm(modes, desc=desc, unit="way"):
        results[mode] = run_isolated(
            target, args.threads, mode=mode, data=data, seq_len=args.seq_len, window=args.window,
            batch_size=args.batch_size, tokens=tokens, layers=args.layers, width=args.width, device=args.device,
            precision=training.precision, dropout=training.dropout, attention_dropout=training.attention_dropout,
            checkpoint_activations=training.checkpoint_activations, compile_layers=training.compile_layers,
        )  # fmt: skip
    return results


def _table(results: dict, columns: tuple) -> None:
    """One row a way: ``columns`` are ``(heading, key, format)``; errors in one line."""
    print(f"{'rows':<14} " + " ".join(f"{heading:>{len(heading)}}" for heading, _, _ in columns) + "  backends")
    for mode, row in results.items():
        if "error" in row:
            print(f"{mode:<14} {row['error'][:100]}")
            continue
        backends = ", ".join(f"{name} x {calls}" for name, calls in row["backends"].items())
        cells = " ".join(
            format(row[key], f">{len(heading)}{spec}") if row[key] is not None else f"{'-':>{len(heading)}}"
            for heading, key, spec in columns
        )
        print(f"{mode:<14} {cells}  {backends}")


def main(args: argparse.Namespace) -> int:
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        print(f"error: --parts {args.parts!r}: give one or more of {', '.join(PARTS)}")
        return 2
    if args.median < 2 or args.documents < 1 or args.valid_documents < 1 or args.tokens < 1 or args.finetune_tokens < 1:
        print("error: --median must be at least 2, --documents, --valid-documents, --tokens and --finetune-tokens "
              "at least 1")  # fmt: skip
        return 2
    summary: dict = {"settings": {k: str(v) for k, v in vars(args).items() if k != "func"}}
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as data:
        if "mlm" in parts:
            training = training_of(args, RECIPE)
            train = corpus(Path(data) / "mlm", args.documents, args.valid_documents, args.median, args.sigma,
                           args.seq_len)  # fmt: skip
            results = _measure("longformer_fs.benchmarks.pack:train_measurement", MODES, "bench pack (mlm)", args,
                               training, str(Path(data) / "mlm"), args.tokens)  # fmt: skip
            print(
                f"continued MLM, {args.layers} layers x {args.width}, window {args.window} per side, {args.batch_size} "
                f"rows of {args.seq_len} tokens a step, as the MLM recipe batches; {args.documents} documents, lengths "
                f"lognormal (median {int(np.median(train))}, mean {train.mean():.0f}, "
                f"{(train == args.seq_len).mean():.1%} clipped at {args.seq_len}); {args.tokens} real tokens each; "
                f"{args.device}, {args.threads} thread(s); {training.describe()}"
            )
            _table(results, (("real tok/s", "tokens_per_s", ".0f"), ("padded", "padded_share", ".1%"),
                             ("leaky rows", "mixed_rows", ".1%"), ("peak MiB", "peak_mib", ".0f"),
                             ("valid bits", "valid_bits", ".3f")))  # fmt: skip
            summary.update(rows=results, training=training.figures(), **ratios(results))
            if summary.get("speed_vs_complete") and summary.get("memory_vs_complete"):
                print(
                    f"packed: {summary['speed_vs_complete_doc']:.2f}x complete_doc's real tokens/s (target >= 1.4), "
                    f"{summary['speed_vs_complete']:.2f}x complete's (target >= 0.95), "
                    f"{summary['memory_vs_complete']:.2f}x its peak memory"
                )
        if "finetune" in parts:
            training = training_of(args, FINETUNE_RECIPE)
            folder = Path(data) / "finetune"
            classification_corpus(folder, args.documents, args.median, args.sigma, args.seq_len - 1)
            results = _measure("longformer_fs.benchmarks.pack:finetune_measurement", FINETUNE_MODES,
                               "bench pack (finetune)", args, training, str(folder), args.finetune_tokens)  # fmt: skip
            print(
                f"\nclassification fine-tuning, the same model with <s> global, {args.batch_size} rows a step (rows of "
                f"up to {args.seq_len} tokens), as the classification recipes batch; {args.documents} documents drawn "
                f"alike; {args.finetune_tokens} real tokens each; {training.describe()}"
            )
            _table(results, (("real tok/s", "tokens_per_s", ".0f"), ("docs/s", "documents_per_s", ".1f"),
                             ("padded", "padded_share", ".1%"), ("peak MiB", "peak_mib", ".0f")))  # fmt: skip
            found = finetune_ratios(results)
            summary.update(finetune_rows=results, finetune_training=training.figures(), finetune=found)
            if found.get("packed_speed_vs_fairseq") and found.get("bucketed_speed_vs_fairseq"):
                print(
                    f"bucketing alone: {found['bucketed_speed_vs_fairseq']:.2f}x fairseq's real tokens/s; packing: "
                    f"{found['packed_speed_vs_fairseq']:.2f}x fairseq's, {found['packed_speed_vs_bucketed']:.2f}x "
                    "bucketed's"
                )
    write_results(args.out, summary)
    return 0
