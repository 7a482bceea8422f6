"""One training step of each model, as fairseq-train runs it: the model, task and criterion
built from command-line arguments, and a batch from the task's own collater.

For the tests of what a step costs the host (training/test_host_waits.py) and of compiled
layers (training/test_compiled_layers.py). Each builder takes a directory for the task's
dictionaries, the sequence length and extra arguments, and returns
``(task, model, criterion, sample, seq_len)``.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary, LanguagePairDataset, data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from helpers import USER_DIR

from longformer_fs.conventions import byte_symbol


def build(argv: list[str]):
    """Task, model and criterion as fairseq-train builds them from ``argv``."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["--user-dir", str(USER_DIR), *argv])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    return task, model.train(), criterion


def to_device(sample, device):
    if isinstance(sample, torch.Tensor):
        return sample.to(device)
    if isinstance(sample, dict):
        return {k: to_device(v, device) for k, v in sample.items()}
    return sample


def train_step(task, model, criterion, sample, update: int = 0):
    """fairseq's ``task.train_step`` (forward, loss, backward), without an optimizer's step."""
    optimizer = types.SimpleNamespace(backward=lambda loss: loss.backward())
    return task.train_step(sample, model, criterion, optimizer, update_num=update)


def write_dictionary(path: Path, symbols: list[str]) -> Dictionary:
    path.write_text("".join(f"{s} 1\n" for s in symbols))
    return Dictionary.load(str(path))


def char_lm(tmp_path: Path, length: int = 64, *extra: str):
    """``longformer_lm`` on the character task (dilated heads, a window per layer), a
    right-padded batch of two sequences, the second 14 shorter."""
    dictionary = write_dictionary(tmp_path / "dict.txt", [byte_symbol(b) for b in range(32, 127)])
    task, model, criterion = build([
        str(tmp_path), "--task", "longformer_char_lm", "--arch", "longformer_lm_small", "--criterion",
        "bpc_cross_entropy", "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
        "--decoder-attention-heads", "4", "--dilated-heads", "2", "--attention-window", "4:16",
        "--attention-dilation", "1,2", "--tokens-per-sample", str(length), "--dropout", "0.1", "--cpu", *extra,
    ])  # fmt: skip
    lengths = (length, length - 14)
    rows = [torch.randint(dictionary.nspecial, len(dictionary), (n,)) for n in lengths]
    tokens = data_utils.collate_tokens(rows, dictionary.pad(), left_pad=False)
    target = torch.roll(tokens, -1, dims=1).masked_fill(tokens == dictionary.pad(), dictionary.pad())
    sample = {"id": torch.arange(2), "nsentences": 2, "ntokens": int((target != dictionary.pad()).sum()),
              "net_input": {"src_tokens": tokens, "src_lengths": torch.tensor(lengths)}, "target": target}  # fmt: skip
    return task, model, criterion, sample, length


def qa_encoder(tmp_path: Path, length: int = 100, *extra: str):
    """``longformer_roberta`` fine-tuning on QA: global attention on each row's question,
    attention dropout as the recipe trains; two rows, the second 24 tokens shorter."""
    from longformer_fs.tasks.qa import QaDataset

    symbols = [str(i) for i in range(200)]
    dictionary = write_dictionary(tmp_path / "dict.txt", symbols)
    task, model, criterion = build([
        str(tmp_path), "--task", "longformer_qa", "--arch", "longformer_roberta_base", "--criterion",
        "longformer_qa", "--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
        "--encoder-attention-heads", "4", "--attention-window", "8", "--max-positions", "512",
        "--dropout", "0.1", "--attention-dropout", "0.1", "--cpu", *extra,
    ])  # fmt: skip
    bos, eos = dictionary.bos(), dictionary.eos()
    samples = []
    for i, (question, document) in enumerate([(5, length - 8), (11, length - 38)]):
        body = torch.randint(dictionary.nspecial, len(symbols), (question + document,))
        source = torch.cat([torch.tensor([bos]), body[:question], torch.tensor([eos]), body[question:],
                            torch.tensor([eos])])  # fmt: skip
        samples.append({"id": i, "source": source, "starts": torch.tensor([question + 3]),
                        "ends": torch.tensor([question + 5])})  # fmt: skip
    dataset = QaDataset(types.SimpleNamespace(sizes=np.array([len(s["source"]) for s in samples])), None, None,
                        task.source_dictionary)  # fmt: skip
    sample = dataset.collater(samples)
    return task, model, criterion, sample, sample["net_input"]["src_tokens"].shape[1]


def led(tmp_path: Path, length: int = 102, *extra: str):
    """``led`` on fairseq's translation task: sources left-padded (the second 30 shorter),
    global attention on the first ``<s>``, attention dropout as the recipe trains."""
    symbols = [str(i) for i in range(200)]
    for side in ("source", "target"):
        dictionary = write_dictionary(tmp_path / f"dict.{side}.txt", symbols)
    task, model, criterion = build([
        str(tmp_path), "--task", "translation", "--source-lang", "source", "--target-lang", "target",
        "--arch", "led_base", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
        "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128", "--encoder-attention-heads", "4",
        "--decoder-attention-heads", "4", "--share-all-embeddings", "--attention-window", "8",
        "--max-source-positions", "512", "--max-target-positions", "64", "--dropout", "0.1",
        "--attention-dropout", "0.1", "--cpu", *extra,
    ])  # fmt: skip
    bos, eos = dictionary.bos(), dictionary.eos()
    sources = [torch.cat([torch.tensor([bos]), torch.randint(4, len(symbols), (n,)), torch.tensor([eos])])
               for n in (length - 2, length - 32)]  # fmt: skip
    targets = [torch.cat([torch.randint(4, len(symbols), (n,)), torch.tensor([eos])]) for n in (20, 12)]
    pairs = LanguagePairDataset(
        sources, np.array([len(s) for s in sources]), task.source_dictionary,
        targets, np.array([len(t) for t in targets]), task.target_dictionary,
    )  # fmt: skip
    sample = pairs.collater([pairs[i] for i in range(2)])
    assert sample["net_input"]["src_tokens"][1, 0] == task.source_dictionary.pad(), "premise: left padding"
    return task, model, criterion, sample, sample["net_input"]["src_tokens"].shape[1]


MODELS = {"char_lm": char_lm, "qa_encoder": qa_encoder, "led": led}
