"""What the tests share besides fixtures (those are in conftest.py): paths, the tiny models'
options, the tiny corpora's text, and running commands: the plugin's CLI and fairseq's
training tools in this process (as fairseq's own tests run them), make's and the journeys'
as processes."""

import contextlib
import importlib
import io
import json
import logging
import os
import random
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The venv the suite's commands run from: this one, or (conftest's warm starts) a view of it
# whose fairseq and longformer-fs commands start warm (tests/zygote.py).
VENV = ROOT / ".venv"
USER_DIR = ROOT / "longformer_fs"

# A 2-layer longformer_lm_small for fairseq-train runs on CPU: the plugin, the task and the
# shape (dilated heads and geometric windows included, so both are exercised).
TINY_CHAR_LM = [
    "--user-dir", str(USER_DIR),
    "--task", "longformer_char_lm", "--arch", "longformer_lm_small",
    "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
    "--decoder-attention-heads", "4", "--dilated-heads", "2",
    "--attention-window", "4:16", "--attention-dilation", "1,2", "--tokens-per-sample", "64",
]  # fmt: skip
# How the tests train it: AdamW at 3e-3 on bits per character, no dropout.
CHAR_LM_TRAINING = ["--optimizer", "adam", "--lr", "3e-3", "--criterion", "bpc_cross_entropy", "--dropout", "0.0"]

# A 2-layer RoBERTa, 64 wide.
TINY_ROBERTA = ["--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128"]
TINY_ROBERTA += ["--encoder-attention-heads", "4"]
# A fairseq run on this machine's CPU, in the main process.
ON_CPU = ["--cpu", "--num-workers", "0"]


# A 2 + 2-layer BART, 64 wide, for fairseq-train (`--arch bart_base` with these sizes), and
# how the tests train it: fairseq's translation task over `prep summarization` data.
BART_SIZES = {
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_embed_dim": 64,
    "decoder_embed_dim": 64,
    "encoder_ffn_embed_dim": 128,
    "decoder_ffn_embed_dim": 128,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
}
TINY_BART = [x for k, v in BART_SIZES.items() for x in (f"--{k.replace('_', '-')}", str(v))]
TINY_BART += ["--share-all-embeddings", "--max-target-positions", "128"]
BART_TRAINING = ["--task", "translation", "--source-lang", "source", "--target-lang", "target",
                 "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.0",
                 "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--batch-size", "16", "--dropout", "0.0",
                 "--attention-dropout", "0", "--no-epoch-checkpoints", *ON_CPU, "--log-format", "simple",
                 "--seed", "1", "--disable-validation", "--user-dir", str(USER_DIR)]  # fmt: skip

# How the fine-tuning tests train: the tiny RoBERTa without dropout, Adam, in this process's
# CPU; and the command of a fine-tuning run of fairseq-train over them (``finetune_args``).
FINETUNE_SIZES = [*TINY_ROBERTA, "--dropout", "0", "--attention-dropout", "0"]
FINETUNE_COMMON = [*ON_CPU, "--log-format", "simple", "--seed", "1", "--no-epoch-checkpoints"]
FINETUNE_COMMON += ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--user-dir", str(USER_DIR)]


# The band backends every attention test runs (docs/design.md, "adding an attention backend").
BAND_BACKENDS = [pytest.param(name, id=name) for name in ("reference", "chunks", "kernel", "flash")]


def backend_or_skip(name):
    from longformer_fs.attention import available_backends

    if name not in available_backends():
        pytest.skip(f"backend {name!r} not available here")
    return name


# ---------------------------------------------------------------- commands


def cli(*args):
    """``longformer-fs ARGS`` in this process (no interpreter start-up): a CompletedProcess
    with the exit code and what was printed. Commands catch user errors themselves."""
    from longformer_fs.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse errors
            code = exit_.code
    return subprocess.CompletedProcess(["longformer-fs", *map(str, args)], code, out.getvalue(), err.getvalue())


# The fairseq tools the tests run in this process, by their entry points' modules.
FAIRSEQ_TOOLS = {
    "fairseq-train": "fairseq_cli.train",
    "fairseq-hydra-train": "fairseq_cli.hydra_train",
    "fairseq-preprocess": "fairseq_cli.preprocess",
    "fairseq-validate": "fairseq_cli.validate",
    "fairseq-generate": "fairseq_cli.generate",
}


def _reset_fairseq_state() -> None:
    """fairseq's globals that one run leaves to the next in a process: the best validation
    loss so far (``save_checkpoint.best``, which would decide a later run's
    ``checkpoint_best.pt``), ``metrics``' aggregators (a failed run leaves them active), the
    TensorBoard writers (kept by split name alone, so a later run would write into the
    first run's ``--tensorboard-logdir``; closed at exit otherwise), the ``composite``
    optimizer's optimizers and schedulers by group (class attributes, so a later composite
    optimizer would also step, and clip, an earlier run's parameters) and Hydra's global
    instance (``fairseq-hydra-train`` initialises it once a process)."""
    from fairseq import checkpoint_utils, metrics
    from fairseq.logging import progress_bar
    from fairseq.optim.composite import FairseqCompositeOptimizer
    from hydra.core.global_hydra import GlobalHydra

    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best
    metrics.reset()
    FairseqCompositeOptimizer.optimizers.clear()
    FairseqCompositeOptimizer.lr_schedulers.clear()
    for writer in progress_bar._tensorboard_writers.values():
        writer.close()
    progress_bar._tensorboard_writers.clear()
    GlobalHydra.instance().clear()


@contextlib.contextmanager
def fairseq_process(argv: list) -> Iterator[io.StringIO]:
    """A run of a fairseq entry point in this process, isolated as a process of its own is:
    ``sys.argv`` is ``argv``; what it logs and prints is captured (yielded), in fairseq's
    log format; fairseq's globals are reset before and after (:func:`_reset_fairseq_state`);
    its background batch loaders, which a finished run leaves waiting on a full queue, are
    stopped (as ``longformer_fs.launch`` stops them); the RNGs it seeds (torch's, NumPy's,
    Python's), torch's thread count and the root logger (fairseq's scripts and Hydra
    configure it) are restored after. What stays, as in fairseq's own tests: its registries
    of models, tasks and criterions, and the plugin's registrations, imported once."""
    from longformer_fs.launch import stop_batch_loaders

    saved = (sys.argv, torch.get_rng_state(), np.random.get_state(), random.getstate(), torch.get_num_threads())
    root = logging.getLogger()
    logging_state = (root.level, list(root.handlers))
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    _reset_fairseq_state()
    sys.argv = [str(a) for a in argv]
    root.handlers, root.level = [handler], logging.INFO
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield log
    finally:
        stop_batch_loaders()
        sys.argv = saved[0]
        torch.set_rng_state(saved[1])
        np.random.set_state(saved[2])
        random.setstate(saved[3])
        torch.set_num_threads(saved[4])
        root.level, root.handlers = logging_state
        _reset_fairseq_state()


def fairseq_result(tool: str, *args) -> subprocess.CompletedProcess:
    """``TOOL ARGS`` (a :data:`FAIRSEQ_TOOLS` name) through the tool's own entry point, in this
    process: its exit code (1 and the traceback in its output when it raises, as a process
    would print it) and its output, as both ``stdout`` and ``stderr``."""
    entry = importlib.import_module(FAIRSEQ_TOOLS[tool]).cli_main
    code = 0
    with fairseq_process([tool, *args]) as log:
        try:
            entry()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except Exception:
            traceback.print_exc(file=log)
            code = 1
    output = log.getvalue()
    return subprocess.CompletedProcess([tool, *map(str, args)], code, output, output)


def fairseq(tool: str, *args) -> str:
    """:func:`fairseq_result` of a run that must succeed: what it logged."""
    result = fairseq_result(tool, *args)
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout


def cli_code(*args) -> str:
    """``python -c`` code that runs ``longformer-fs ARGS`` as its console script does."""
    return f"import sys\nfrom longformer_fs.cli import main\nsys.exit(main({[str(a) for a in args]!r}))\n"


def ok(*args) -> str:
    """``longformer-fs ARGS`` that must succeed: what it printed."""
    result = cli(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def fails(*args) -> str:
    """``longformer-fs ARGS`` that must stop with a user error (exit 2, no traceback): its message."""
    result = cli(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def command(cmd, real: bool = False) -> list[str]:
    """``cmd`` as strings; a command of this venv's (``BIN / "fairseq-train"``) becomes its
    warm start's unless ``real`` (a test of a new interpreter's imports or shutdown)."""
    cmd = [str(c) for c in cmd]
    program = Path(cmd[0])
    if not real and program.parent == BIN and (VENV / "bin" / program.name).exists():
        cmd[0] = str(VENV / "bin" / program.name)
    return cmd


def venv_view(view: Path, source: Path, commands: Path | None = None) -> Path:
    """A view of the venv ``source`` at ``view``: each of its entries linked, with a fresh
    install stamp, so that ``make`` takes the install as done, as it is. With ``commands``,
    ``bin/`` is linked entry by entry, a command found in ``commands`` taken from there."""
    view.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name != ".installed" and not (commands and entry.name == "bin"):
            (view / entry.name).symlink_to(entry)
    if commands:
        (view / "bin").mkdir()
        for entry in (source / "bin").iterdir():
            (view / "bin" / entry.name).symlink_to(commands / entry.name if (commands / entry.name).exists() else entry)
    (view / ".installed").touch()
    return view


def run(*cmd, env=None, timeout=900, real: bool = False) -> str:
    """A process (fairseq-train, make, ...) in the repository that must succeed: its output."""
    result = subprocess.run(command(cmd, real), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def make(target, *variables, env=None, timeout=900) -> subprocess.CompletedProcess:
    """``make TARGET VARIABLES`` in the repository, which may fail: its CompletedProcess. The
    installed venv (:data:`VENV`) is taken as up to date."""
    cmd = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", f"VENV={VENV}", target, *map(str, variables)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_logged(log: str, split: str, key: str) -> float:
    """``key`` of the last ``train`` / ``valid`` summary line fairseq-train logged (simple format)."""
    lines = [line for line in log.splitlines() if f"| {split} |" in line]
    fields = [part.strip().split() for part in lines[-1].split("|")]
    return float(next(f[1] for f in fields if len(f) == 2 and f[0] == key))


def argmax_continuation(hub, prompt: str, written: str) -> list[int]:
    """The most likely byte after each prefix of ``prompt + written`` (past the prompt), by
    one forward pass over the whole text from ``</s>``, as fairseq's LM task starts a
    line: no cache, no generator; among the dictionary's byte symbols (text is bytes).
    Returns them with the bytes ``written`` holds."""
    import torch

    from longformer_fs.conventions import byte_symbol

    dictionary = hub.task.dictionary
    symbols = {byte_symbol(b) for b in range(256)}
    not_bytes = torch.tensor([i < dictionary.nspecial or s not in symbols for i, s in enumerate(dictionary.symbols)])
    ids = hub.encode(prompt + written)[:-1]
    tokens = torch.cat([torch.tensor([dictionary.eos()]), ids])[None]
    with torch.no_grad():
        logits = hub.model(tokens)[0][0].masked_fill(not_bytes, float("-inf"))
    start = len(prompt.encode())
    return logits[start : start + len(written.encode())].argmax(-1).tolist(), ids[start:].tolist()


def read_char_split(data: Path, split: str) -> bytes:
    """A prepared character split's bytes, read through fairseq's own dataset reader and the
    ``0xHH`` byte symbols of its ``dict.txt``."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(data / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(data / split), dictionary, "mmap")
    tokens = np.concatenate([dataset[i].numpy() for i in range(len(dataset))])
    return bytes(0 if dictionary[int(t)] == "<unk>" else int(dictionary[int(t)], 16) for t in tokens)


def fairseq_json_logs(log: str, tags=("train_inner", "valid")) -> list[tuple[str, dict]]:
    """The ``(tag, entry)`` of each line fairseq logged as ``| TAG | {json}`` (--log-format json)."""
    entries = []
    for line in log.splitlines():
        for tag in tags:
            marker = f"| {tag} | "
            if marker in line:
                entries.append((tag, json.loads(line.split(marker, 1)[1])))
    return entries


def train_char_lm(data, *extra, model=TINY_CHAR_LM) -> subprocess.CompletedProcess:
    """fairseq-train of the ``model`` options on ``data``, logging JSON, in this process
    (:func:`fairseq_result`)."""
    return fairseq_result("fairseq-train", data, *model, *CHAR_LM_TRAINING, "--batch-size", "8", "--log-format",
                          "json", "--log-interval", "10", *ON_CPU, *extra)  # fmt: skip


def char_lm_logs(data, *extra) -> list[tuple[str, dict]]:
    """:func:`train_char_lm` that must succeed: its train_inner and valid log entries."""
    result = train_char_lm(data, *extra)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return fairseq_json_logs(result.stdout + result.stderr)


def shared_root(tmp_path_factory) -> Path:
    """The run's temporary root that every pytest-xdist worker shares."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if "PYTEST_XDIST_WORKER" in os.environ else root


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A directory ``build(directory)`` fills once per test run, however many pytest-xdist
    workers ask for it (the toy world's ``built_once``, in the run's shared root)."""
    from longformer_fs.report.recipe_runs import built_once as once

    return once(shared_root(tmp_path_factory), name, build)


# ---------------------------------------------------------------- unreadable checkpoints


class _RunsCode:
    """Pickles as a call to ``os.system``: what a checkpoint from a stranger may hold."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def unreadable_checkpoints(directory: Path, good: Path) -> tuple[dict[str, Path], Path]:
    """A truncated copy of ``good`` and a checkpoint whose unpickling would create a file:
    ``({kind: path}, that file)``."""
    directory.mkdir(parents=True, exist_ok=True)
    truncated, hostile, marker = directory / "truncated.pt", directory / "runs_code.pt", directory / "it_ran"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    import torch

    torch.save({"model": {}, "cfg": {"model": {"_name": "x"}}, "x": _RunsCode(f"touch {marker}")}, hostile)
    return {"truncated": truncated, "runs code": hostile}, marker


def assert_refused_in_one_line(directory: Path, args: list[str], tmp: Path, good: Path) -> None:
    """``longformer-fs ARGS`` run in ``directory``, ``{checkpoint}`` in them replaced by a
    truncated copy of ``good`` and by a checkpoint that would run code: each exits 2 with
    one line naming the file, runs nothing, and leaves an ``--out`` it was given as it was."""
    bad, marker = unreadable_checkpoints(tmp, good)
    out = Path(args[args.index("--out") + 1]) if "--out" in args else None
    for kind, path in bad.items():
        with contextlib.chdir(directory):
            before = _snapshot(out)
            result = cli(*[str(path) if a == "{checkpoint}" else a for a in args])
            after = _snapshot(out)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and str(path) in lines[0], (kind, args, result.stderr)
        assert not marker.exists(), f"{args[0]} ran the code in a checkpoint"
        assert before == after, f"{args[0]} changed {out} on a {kind} checkpoint"


def _snapshot(directory: Path | None) -> dict | None:
    if directory is None or not directory.exists():
        return None
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- inputs


def fake_checkpoint(directory: Path, model: str, state: dict) -> Path:
    """A fairseq checkpoint of architecture ``model`` holding ``state``, and a dict.txt: the
    shape of a release directory, for converters to refuse."""
    import torch

    directory.mkdir()
    history = [{"criterion_name": "x", "optimizer_name": "y", "lr_scheduler_state": {}, "num_updates": 0}]
    checkpoint = {
        "model": state,
        "cfg": {"model": {"_name": model}},
        "optimizer_history": history,
        "extra_state": {"train_iterator": {"epoch": 1}},
    }
    torch.save(checkpoint, directory / "model.pt")
    (directory / "dict.txt").write_text("a 1\n")
    return directory


def runs_text(n_words: int, seed: int, vocabulary: int = 16) -> str:
    """Lines of 40 words; each random word is repeated 3 to 6 times in a row."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    while len(words) < n_words:
        words += [f"w{rng.integers(vocabulary)}"] * int(rng.integers(3, 7))
    return "\n".join(" ".join(words[i : i + 40]) for i in range(0, n_words, 40)) + "\n"


def print_results(title: str, results: dict, row) -> None:
    """A miniature table the tests filled (``pytest -s`` shows it): ``row(name, value)`` per line."""
    if results:
        print(title)
        for name, value in results.items():
            print(row(name, value))


def pretrain_roberta(masked_lm_data: Path, dictionary: Path, save: Path, updates: int = 30) -> Path:
    """The "released" RoBERTa of a fine-tuning test: ``updates`` masked-LM steps of the tiny
    RoBERTa (128 positions) by fairseq-train on ``masked_lm_data`` (a binarized directory
    whose dict is ``dictionary``). Returns ``save``, holding model.pt and dict.txt, as
    ``convert-roberta`` reads them."""
    fairseq("fairseq-train", masked_lm_data, "--task", "masked_lm", "--criterion", "masked_lm",
            "--arch", "roberta", *FINETUNE_SIZES, "--max-positions", "128", "--tokens-per-sample", "128",
            "--sample-break-mode", "none", "--lr", "1e-3", "--batch-size", "16", "--max-update", str(updates),
            "--save-dir", save, "--disable-validation", *FINETUNE_COMMON)  # fmt: skip
    (save / "checkpoint_last.pt").rename(save / "model.pt")
    (save / "dict.txt").write_bytes(dictionary.read_bytes())
    return save


def finetune_args(data, save, *args, updates: int, lr: str = "1e-3", batch_size: int = 16) -> list:
    """fairseq-train's arguments for fine-tuning the tiny model on ``data`` for ``updates`` steps (linear
    warmup over a tenth then decay), validating once at the end (fairseq also validates, and
    saves a best checkpoint, at every epoch's end, unless the interval in epochs is out of
    reach: a tiny training set has many epochs)."""
    return [data, *FINETUNE_SIZES, *FINETUNE_COMMON, "--lr", lr, "--clip-norm", "1",
            "--lr-scheduler", "polynomial_decay",
            "--warmup-updates", str(updates // 10), "--total-num-update", str(updates),
            "--max-update", str(updates), "--save-dir", save, "--validate-interval-updates", str(updates),
            "--validate-interval", str(updates),
            "--batch-size", str(batch_size), "--no-last-checkpoints", *args]  # fmt: skip


def compose_recipe(config_dir: Path, name: str, overrides=(), return_hydra_config: bool = True):
    """A Hydra config as fairseq-hydra-train composes it, without changing this process:
    Hydra's version base is process-wide, and once it is above 1.1 fairseq's own config
    conversion (``convert_namespace_to_omegaconf``, on the older Hydra API) raises."""
    from hydra import compose, initialize_config_dir
    from hydra.version import VersionBase

    saved = VersionBase.instance().version_base
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return compose(config_name=name, overrides=list(overrides), return_hydra_config=return_hydra_config)
    finally:
        VersionBase.instance().version_base = saved


class PreparedSplit:
    """What ``eval-qa`` asks of a ``longformer_qa`` task, read from a ``prep qa`` directory:
    a stand-in for the model's task where the model's answers are stubbed."""

    windows = True

    def __init__(self, data: Path):
        self.cfg = SimpleNamespace(data=str(data))

    def load_dataset(self, split):
        pass

    def examples(self, split):
        return [json.loads(line) for line in (Path(self.cfg.data) / f"{split}.examples.jsonl").read_text().splitlines()]
