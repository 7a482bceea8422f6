"""The report's recipes on the device: one toy run of each recipe family through ``make``,
in the recipe's own precision and with its own dropout (only sizes and step counts are
overridden), then the model it trained through its hub, on the device. Each run records the
precision and dropouts it trained with (from its checkpoint) and the attention backends its
training took (from its log), and on a GPU whether those are fast ones.

The inputs are built here (:class:`ToyWorld`), once per report, and once per run of the test
suite, whose fixtures they are, in the layouts users bring them: a text8 zip,
GPT-2-style BPE files trained on this checkout's own docs, fairseq RoBERTa and BART releases
(a few updates of ``fairseq-train``), arXiv's JSONL release and SQuAD-format questions. Only
the sizes are toy: every run is the real recipe with sizes overridden in ``HYDRA_ARGS``.

``make`` runs in the checkout with ``VENV`` pointing at a view of this interpreter (its
commands, and a fresh install stamp): where the report runs (a venv, or the GPU machine's
``.gpu/on_device.sh``) is where the recipes run.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from data_prep.char_corpus import prepare as prepare_char_corpus
from data_prep.gpt2_bpe import train_bpe

from .. import checkout, devices, output
from ..fairseq_format import config_get, model_config, read_checkpoint
from .parts import command_output
from .runner import Context, PartFailed

# Model sizes and a few updates, as overrides of the recipes (nothing else changes).
CHAR_LM = [
    "model.decoder_layers=2", "model.decoder_embed_dim=32", "model.decoder_ffn_embed_dim=64",
    "model.decoder_attention_heads=4", "model.attention_dilation=\"'1,2'\"", "task.tokens_per_sample=64",
    "dataset.batch_size=8", "optimization.max_update=4", "lr_scheduler.warmup_updates=1", "dataset.num_workers=0",
    "dataset.validate_interval_updates=4", "checkpoint.save_interval_updates=4",
]  # fmt: skip
ROBERTA_SIZES = {"encoder_layers": 2, "encoder_embed_dim": 64, "encoder_ffn_embed_dim": 128,
                 "encoder_attention_heads": 4}  # fmt: skip
BART_SIZES = {**ROBERTA_SIZES, "decoder_layers": 2, "decoder_embed_dim": 64, "decoder_ffn_embed_dim": 128,
              "decoder_attention_heads": 4}  # fmt: skip
SHORT_RUN = ["dataset.batch_size=2", "optimization.update_freq=[1]", "optimization.max_update=2",
             "dataset.num_workers=0"]  # fmt: skip
MLM = [*(f"++model.{k}={v}" for k, v in ROBERTA_SIZES.items()), "task.tokens_per_sample=512", *SHORT_RUN]
LED = [*(f"++model.{k}={v}" for k, v in BART_SIZES.items()), *SHORT_RUN]
FINETUNE = ["optimization.max_update=2", "dataset.num_workers=0"]
RELEASE_TRAINING = ["--optimizer", "adam", "--lr", "1e-3", "--dropout", "0", "--attention-dropout", "0",
                    "--max-update", "2", "--disable-validation", "--no-epoch-checkpoints", "--cpu",
                    "--num-workers", "0", "--log-format", "simple", "--seed", "1"]  # fmt: skip


def _flags(sizes: dict) -> list[str]:
    return [x for k, v in sizes.items() for x in (f"--{k.replace('_', '-')}", str(v))]


# The toy text8's train, valid and test characters.
TEXT8_SPLITS = (16000, 2000, 2000)


def built_once(root: Path, name: str, build) -> Path:
    """``root/name``, filled by ``build(directory)`` once however many processes ask for it
    (the test suite's workers share one world): the first builds it under a lock, the
    others wait and read it. A directory left half built by a failed build is built again."""
    from filelock import FileLock

    root = Path(root)
    path, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if path.exists():
                shutil.rmtree(path)
            path.mkdir(parents=True)
            build(path)
            done.touch()
    return path


def write_arxiv_release(directory: Path, sentences: list[str], papers: tuple[int, int, int] = (6, 2, 2)) -> Path:
    """``directory/{train,val,test}.txt`` as the arXiv dataset ships them: one JSON line a
    paper of twelve of ``sentences`` (drawn with a fixed seed), ``article_text`` and
    ``abstract_text`` lists of sentences (the abstract's wrapped in ``<S>`` ... ``</S>``),
    with ``article_id``, ``section_names`` and ``sections``. ``papers``: how many a split."""
    rng = random.Random(0)
    number = 0
    for name, count in zip(("train.txt", "val.txt", "test.txt"), papers, strict=True):
        lines = []
        for _ in range(count):
            article = [rng.choice(sentences) for _ in range(12)]
            lines.append(json.dumps({"article_id": f"1801.{number:05d}", "article_text": article,
                                     "abstract_text": [f"<S> {s} </S>" for s in article[:2]],
                                     "section_names": ["introduction", "method"],
                                     "sections": [article[:6], article[6:]]}))  # fmt: skip
            number += 1
        (directory / name).write_text("\n".join(lines) + "\n")
    return directory


class ToyWorld:
    """The small inputs of the recipe runs and of the test suite, in the layouts users bring
    them, each built once under ``root`` when first asked for.

    ``prose`` is the English the tokenizer and the corpora are made of (this checkout's
    README and docs unless given). :meth:`fairseq_train` and :meth:`command` run fairseq's
    training and our CLI in this process; the tests override them to run through their own
    isolation of fairseq's global state.
    """

    def __init__(self, root: Path, prose: list[str] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.prose = prose

    def _once(self, name: str, build) -> Path:
        return built_once(self.root, name, build)

    # ------------------------------------------------------------------ the environment

    def venv(self) -> Path:
        """What ``make`` needs of a venv, pointing at this interpreter: ``python``, the
        commands, and an install stamp newer than the Makefile's inputs."""

        def build(path: Path) -> None:
            (path / "bin").mkdir()
            launchers = {
                "python": "",
                "longformer-fs": "-m longformer_fs.cli",
                "torchrun": "-m torch.distributed.run",
                "fairseq-hydra-train": "-m longformer_fs.launch fairseq-hydra-train",
            }
            for name, module in launchers.items():
                script = path / "bin" / name
                script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {module} "$@"\n')
                script.chmod(0o755)

        path = self._once("venv", build)
        (path / ".installed").touch()
        return path

    def make(self, target: str, **variables) -> str:
        """``make TARGET VAR=value ...`` in the checkout; its output (raises on failure)."""
        if shutil.which("make") is None:
            raise PartFailed("make is not installed on this machine; the recipes run through it")
        root = checkout.path("Makefile", f"make {target}").parent
        argv = ["make", "--no-print-directory", "-C", str(root), target, f"VENV={self.venv()}"]
        argv += [f"{k}={v}" for k, v in variables.items()]
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        env.update(PWD=str(root), PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])))
        print("$", " ".join(argv), flush=True)
        result = subprocess.run(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(result.stdout, flush=True)
        if result.returncode != 0:
            raise PartFailed(f"make {target} exited {result.returncode}: {_last_error(result.stdout)}")
        return result.stdout

    @staticmethod
    def fairseq_train(*args) -> None:
        """``fairseq-train ARGS`` in this process (a part's own, forked with fairseq imported)."""
        from fairseq_cli.train import cli_main

        from ..launch import stop_batch_loaders

        print("$ fairseq-train", *args, flush=True)
        saved, sys.argv = sys.argv, ["fairseq-train", *map(str, args)]
        try:
            cli_main()
        finally:
            sys.argv = saved
            stop_batch_loaders()

    def _release(self, path: Path) -> None:
        """``path`` as fairseq's releases ship: the run's last checkpoint as ``model.pt``, and
        ``dict.txt``; the run's own directory (``save/``) goes."""
        output.move(path / "save" / "checkpoint_last.pt", path / "model.pt")
        (path / "dict.txt").write_bytes((self.gpt2() / "dict.txt").read_bytes())
        shutil.rmtree(path / "save")

    @staticmethod
    def command(*argv) -> None:
        status, _ = command_output([str(a) for a in argv])
        if status != 0:
            raise PartFailed(f"longformer-fs {argv[0]} exited {status}")

    # --------------------------------------------------------------------------- inputs

    def text8(self) -> Path:
        """A DATA directory holding ``text8/``, prepared from a zip in the release's layout:
        :data:`TEXT8_SPLITS` characters of ten short words."""

        def build(path: Path) -> None:
            rng = np.random.default_rng(0)
            words = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far"]
            text = b" ".join(words[i] for i in rng.integers(0, len(words), 6000))[: sum(TEXT8_SPLITS)]
            with zipfile.ZipFile(path / "text8.zip", "w") as archive:
                archive.writestr("text8", text)
            prepare_char_corpus("text8", path / "data" / "text8", path / "text8.zip", verify=False,
                                split_sizes=TEXT8_SPLITS)  # fmt: skip

        return self._once("text8", build) / "data"

    def english(self) -> list[str]:
        """Real English prose: ``prose``, or this checkout's README and docs."""
        if self.prose is not None:
            return list(self.prose)
        docs = checkout.path("docs", "the report's tokenizer (trained on the docs)")
        return [p.read_text(encoding="utf-8") for p in [docs.parent / "README.md", *sorted(docs.glob("*.md"))]]

    def gpt2(self) -> Path:
        """``encoder.json``, ``vocab.bpe`` and a RoBERTa-style ``dict.txt`` over them."""
        return self._once("gpt2", lambda path: train_bpe(self.english(), path, 800))

    def bpe_args(self) -> list:
        gpt2 = self.gpt2()
        return ["--encoder-json", gpt2 / "encoder.json", "--vocab-bpe", gpt2 / "vocab.bpe", "--dict", gpt2 / "dict.txt"]

    def documents(self) -> Path:
        """The docs as a masked-LM corpus (``prep docs``), in RoBERTa's dictionary."""

        def build(path: Path) -> None:
            (path / "txt").mkdir()
            for i, text in enumerate(self.english()):
                (path / "txt" / f"{i}.txt").write_text(text)
            self.command("prep", "docs", "--source", f"docs=txt:{path / 'txt'}", *self.bpe_args(), "--workers", "1",
                         "--out", path / "data")  # fmt: skip

        return self._once("documents", build) / "data"

    def roberta(self) -> Path:
        """A fairseq RoBERTa release (``model.pt``, ``dict.txt``): two updates of fairseq-train."""

        def build(path: Path) -> None:
            self.fairseq_train(self.documents(), "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta",
                               *_flags(ROBERTA_SIZES), "--max-positions", "128", "--tokens-per-sample", "128",
                               "--sample-break-mode", "none", "--batch-size", "8", "--save-dir", path / "save",
                               *RELEASE_TRAINING)  # fmt: skip
            self._release(path)

        return self._once("roberta", build)

    def arxiv(self) -> Path:
        """arXiv's release (``train.txt``, ``val.txt``, ``test.txt``: JSON lines of sentence lists)."""

        def build(path: Path) -> None:
            sentences = [s.strip() + " ." for text in self.english() for s in re.split(r"[.\n]", text)]
            write_arxiv_release(path, [s for s in sentences if len(s.split()) >= 6])

        return self._once("arxiv", build)

    def summaries(self) -> Path:
        """arXiv prepared for LED (``prep summarization --format arxiv``)."""

        def build(path: Path) -> None:
            arxiv = self.arxiv()
            self.command("prep", "summarization", "--format", "arxiv", "--train", arxiv / "train.txt", "--valid",
                         arxiv / "val.txt", "--test", arxiv / "test.txt", *self.bpe_args(), "--workers", "1",
                         "--out", path / "data")  # fmt: skip

        return self._once("summaries", build) / "data"

    def bart(self) -> Path:
        """A fairseq BART release: two updates of fairseq-train on the summaries."""

        def build(path: Path) -> None:
            self.fairseq_train(self.summaries(), "--task", "translation", "--source-lang", "source", "--target-lang",
                               "target", "--criterion", "cross_entropy", "--arch", "bart_base", *_flags(BART_SIZES),
                               "--share-all-embeddings", "--max-source-positions", "1024", "--max-target-positions",
                               "1024", "--batch-size", "4", "--save-dir", path / "save", *RELEASE_TRAINING)  # fmt: skip
            self._release(path)

        return self._once("bart", build)

    def questions(self) -> Path:
        """SQuAD-format questions on the docs' paragraphs, prepared by ``prep qa``."""

        def build(path: Path) -> None:
            paragraphs = [p.strip() for text in self.english() for p in text.split("\n\n") if len(p.split()) > 40]
            rng = random.Random(0)
            files = {}
            for split, count in (("train", 16), ("valid", 4)):
                data = []
                for n, context in enumerate(rng.sample(paragraphs, count)):
                    words = context.split()
                    answer = rng.choice([w for w in words[10:] if w.isalpha() and len(w) > 3] or words[-1:])
                    start = context.index(answer, len(" ".join(words[:10])))
                    question = f"Which word follows {' '.join(words[:3])}?"
                    qas = [{"id": f"{split}-{n}", "question": question,
                            "answers": [{"text": answer, "answer_start": start}]}]  # fmt: skip
                    data.append({"title": f"{split}-{n}", "paragraphs": [{"context": context, "qas": qas}]})
                files[split] = path / f"{split}.json"
                files[split].write_text(json.dumps({"version": "1.1", "data": data}))
            self.command("prep", "qa", "--format", "squad", "--train", files["train"], "--valid", files["valid"],
                         *self.bpe_args(), "--max-tokens", "512", "--out", path / "data")  # fmt: skip

        return self._once("questions", build) / "data"


def _last_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"error|Error|exited|Exception", line)]
    return (errors or lines or ["no output"])[-1][:300]


def _world(ctx: Context) -> ToyWorld:
    return ToyWorld(ctx.work / "toy_world")


def _trained(checkpoint: Path) -> dict:
    """How a run trained, as its checkpoint records fairseq's settings: its precision and
    its model's dropout and attention dropout."""
    state = read_checkpoint(checkpoint)
    common, model = state["cfg"]["common"], model_config(state)
    return {
        "precision": "bf16" if common.get("bf16") else "fp16" if common.get("fp16") else "fp32",
        "dropout": config_get(model, "dropout"),
        "attention_dropout": config_get(model, "attention_dropout"),
    }


# What longformer_fs.attention.backends logs (INFO, once per process and choice) when `auto`
# chooses, and when a backend hands a kind of call to another.
_AUTO_CHOICE = re.compile(r"attention backend auto -> (\w+) on (\w+)")
_HANDED_OVER = re.compile(r"attention backend (\w+) -> (\w+) for (.+?) calls:")
# The backends that do the band's work on a GPU at a fast kernel's speed (docs/benchmarks.md);
# `chunks` is blocked PyTorch and our CUDA kernel has no tensor cores.
FAST_ON_GPU = ("flash", "flex")


def attention_backends(log: str, device: str) -> dict:
    """Which attention backends a run's training took, from its log (``make``'s output).

    Returns:
        ``attention_backends``: each ``"NAME on DEVICE"`` that ``auto`` chose;
        ``attention_handed_over``: each ``"FROM -> TO for KIND calls"``; and, on a GPU,
        ``fast_backend``: whether every backend that computed calls there is a fast one
        (:data:`FAST_ON_GPU`), None elsewhere or when the log names none.
    """
    chosen = sorted({(name, where) for name, where in _AUTO_CHOICE.findall(log)})
    handed = sorted(set(_HANDED_OVER.findall(log)))
    on_gpu = {name for name, where in chosen if where == "cuda"} | {to for _, to, _ in handed}
    fast = None
    if devices.on_gpu(device) and on_gpu:
        fast = all(name in FAST_ON_GPU for name in on_gpu)
    return {
        "attention_backends": [f"{name} on {where}" for name, where in chosen],
        "attention_handed_over": [f"{a} -> {b} for {kind} calls" for a, b, kind in handed],
        "fast_backend": fast,
    }


def _hub(path: Path, checkpoint: str, device: str):
    from ..hub import from_pretrained

    return from_pretrained(str(path), checkpoint).to(device)


def _device_of(model) -> str:
    return str(next(model.parameters()).device)


def text8(ctx: Context) -> dict:
    """``make text8-phase1``, then the character LM's hub writing on the device."""
    world = _world(ctx)
    save = ctx.work / "checkpoints" / "char_lm"
    log = world.make("text8-phase1", DATA=world.text8(), SAVE=save, HYDRA_ARGS=" ".join(CHAR_LM))
    trained = save / "text8" / "small" / "phase1"
    ctx.record(**_trained(trained / "checkpoint_last.pt"), **attention_backends(log, ctx.device))
    lm = _hub(trained, "checkpoint_last.pt", ctx.device)
    written = lm.sample("the cat ", max_new=32, greedy=True)
    return {"hub": {"device": _device_of(lm), "sample": written}}


def mlm_base(ctx: Context) -> dict:
    """``make mlm-base`` from a fairseq RoBERTa release, then the encoder hub's ``fill_mask``."""
    world = _world(ctx)
    save = ctx.work / "checkpoints" / "mlm"
    log = world.make("mlm-base", ROBERTA=world.roberta(), DATA=world.documents(), MLM_SAVE=save,
                     HYDRA_ARGS=" ".join(MLM))  # fmt: skip
    ctx.record(**_trained(save / "base_4096" / "checkpoint_last.pt"), **attention_backends(log, ctx.device))
    model = _hub(save / "base_4096", "checkpoint_last.pt", ctx.device)
    filled = model.fill_mask("Every command has <mask> help.", topk=2)
    return {"hub": {"device": _device_of(model), "fill_mask": [f[0] for f in filled]}}


def finetune_triviaqa(ctx: Context) -> dict:
    """``make finetune-triviaqa`` on a converted RoBERTa, then the QA hub's ``answer``."""
    world = _world(ctx)
    converted = ctx.work / "converted_roberta"
    if not (converted / "model.pt").is_file():
        world.command("convert-roberta", world.roberta(), "--out", converted)
    save = ctx.work / "checkpoints" / "finetune"
    log = world.make("finetune-triviaqa", MODEL=converted / "model.pt", DATA=world.questions(), FT_SAVE=save,
                     HYDRA_ARGS=" ".join(FINETUNE))  # fmt: skip
    ctx.record(**_trained(save / "triviaqa" / "checkpoint_best.pt"),
               evaluation=[line for line in log.splitlines() if "EM" in line][-1:],
               **attention_backends(log, ctx.device))  # fmt: skip
    model = _hub(save / "triviaqa", "checkpoint_best.pt", ctx.device)
    answer = model.answer("Which command prepares the data?", "The prep command prepares the data for training.")
    return {"hub": {"device": _device_of(model), "answer": answer}}


def summarize_arxiv(ctx: Context) -> dict:
    """``make summarize-arxiv`` from a fairseq BART release, then the LED hub summarizing."""
    world = _world(ctx)
    save = ctx.work / "checkpoints" / "summarization"
    log = world.make("summarize-arxiv", BART=world.bart(), DATA=world.summaries(), GPT2=world.gpt2(), SUM_SAVE=save,
                     HYDRA_ARGS=" ".join(LED), SUMMARIZE_ARGS="--min-len 2 --max-len 8")  # fmt: skip
    ctx.record(**_trained(save / "large_16k" / "checkpoint_best.pt"),
               rouge=[line for line in log.splitlines() if "ROUGE" in line][-3:],
               **attention_backends(log, ctx.device))  # fmt: skip
    led = _hub(save / "large_16k", "checkpoint_best.pt", ctx.device)
    summary = led.sample("We study attention over long documents. " * 8, beam=2, min_len=2, max_len_b=8)
    return {"hub": {"device": _device_of(led), "summary": summary}}
