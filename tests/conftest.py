"""Fixtures the tests share. The tiny corpora and models are session fixtures: each is
built or trained once per pytest run, when a test first asks for it, and read (never
changed) by every test that asks for it after. Functions and constants the tests share
are in helpers.py."""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Under pytest-xdist (`make test` runs one worker per core) each worker, and every process
# it starts, gets its share of the cores: set before torch is imported, and inherited.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _threads = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _threads)


def _keep_freed_memory() -> None:
    """glibc's malloc hands tensors of more than 128 KiB to mmap and gives freed memory back
    at once, so each training step of the tiny models faults its buffers in again, zeroed by
    the kernel: 3.4 million page faults and 15% of test_coref's CPU time. Kept in the heap
    (large tensors from it, up to 512 MiB left unreturned), the same module runs in 17%
    less CPU time. Set for the processes the suite starts (glibc reads these at start) and,
    through mallopt, for this one."""
    import ctypes

    settings = {"MMAP_THRESHOLD": (-3, 256 << 20), "TRIM_THRESHOLD": (-1, 512 << 20), "TOP_PAD": (-2, 64 << 20)}
    for name, (_, value) in settings.items():
        os.environ.setdefault(f"MALLOC_{name}_", str(value))
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its own allocator, left as it is
        return
    for name, (option, _) in settings.items():
        libc.mallopt(option, int(os.environ[f"MALLOC_{name}_"]))


_keep_freed_memory()
# The suite starts hundreds of interpreters; with PYTHONDONTWRITEBYTECODE (set on CI's
# machine) each compiled the plugin and pytest rewrote every test module again, 4-5 s of
# CPU time per worker's collection alone. Their caches are this checkout's (__pycache__/,
# ignored by git).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

from helpers import (  # noqa: E402
    BIN,
    ON_CPU,
    ROOT,
    TINY_ROBERTA,
    built_once,
    char_lm_logs,
    fairseq,
    ok,
    runs_text,
    shared_root,
    venv_view,
)
from hf_models import (  # noqa: E402
    bart_as_hf,
    english,
    multilingual,
    save_model,
    scaled,
    train_tokenizer,
    train_xlmr_tokenizer,
    vocab_size,
)
from releases import ARXIV_SENTENCES, REVIEWS, WIKIPEDIA  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- warm starts (tests/zygote.py)

_WARM: dict = {}
_WARM_VIEW = "LFS_ZYGOTE_VENV"  # where the xdist workers find the controller's view of the venv


def pytest_configure(config):
    """fairseq's and our commands start warm in this run's tests: a view of the venv whose
    commands are the zygote's shims becomes ``helpers.VENV``, which ``run``, ``make`` and the
    journeys use. One server for the run, started before collection so that it has imported
    by the first test: by the xdist controller before it starts its workers, which inherit
    its address (one preload of torch, fairseq and transformers, not one a worker: 2 cores
    import the rest of the suite meanwhile). LFS_COLD_STARTS=1: every process cold."""
    if os.environ.get("LFS_COLD_STARTS") == "1":
        return
    import zygote

    if hasattr(config, "workerinput"):
        if os.environ.get(_WARM_VIEW):
            _use_view(Path(os.environ[_WARM_VIEW]))
        return
    root = Path(tempfile.mkdtemp(prefix="lfs-warm-"))
    shims = zygote.write_shims(root / "shims", BIN)
    view = venv_view(root / "venv", ROOT / ".venv", shims)
    _WARM["server"], address = zygote.start(root, BIN / "python")  # commands wait for it rather than start cold
    _WARM["root"] = root
    os.environ[zygote.ENV] = address
    os.environ[_WARM_VIEW] = str(view)
    _use_view(view)


def _use_view(view: Path) -> None:
    """The tests' commands, and what the code under test starts as ``sys.executable -m ...``
    (the benches' isolated measurements: a fresh interpreter each, 7 s of imports here), start
    warm: this process's ``sys.executable`` is the view's python, as a zygote child's is.
    ``-c`` code and other modules still run in the real interpreter (the shim execs it)."""
    import helpers

    helpers.VENV = view
    sys.executable = str(view / "bin" / "python")


@pytest.fixture(scope="session")
def fresh_python():
    """A ``python`` whose ``-c`` runs are new interpreters that have imported only the
    libraries under fairseq and the plugin (tests/zygote.py, ``--fresh``), for tests of
    what a process imports first. LFS_COLD_STARTS=1: this venv's own python."""
    import time

    import zygote

    if os.environ.get("LFS_COLD_STARTS") == "1":
        yield sys.executable
        return
    root = Path(tempfile.mkdtemp(prefix="lfs-fresh-"))  # short: a socket's path has at most 107 bytes
    server, address = zygote.start(root, BIN / "python", fresh=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(address):  # a server that cannot start fails here, not silently cold
        assert server.poll() is None and time.monotonic() < deadline, (root / "fresh.log").read_text()[-3000:]
        time.sleep(0.05)
    os.environ[zygote.FRESH_ENV] = address
    try:
        yield str(zygote.write_fresh_shim(root / "python", BIN))
    finally:
        os.environ.pop(zygote.FRESH_ENV, None)
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def pytest_collection_finish(session):
    import zygote

    zygote.quiet_collector()  # every test module's imports are in: out of the collector's way


def pytest_unconfigure(config):
    if "server" in _WARM:
        _WARM["server"].stdin.close()
        _WARM["server"].wait(timeout=60)
        shutil.rmtree(_WARM.pop("root"), ignore_errors=True)


# `--dist loadscope` hands whole modules to the workers in collection order; in tests/'
# alphabetical order the journeys came last, and one worker ran them alone while the other
# had finished. So modules start longest first, by the seconds each took in a recorded run
# (tests/durations.json, written by `make test-durations`, never by hand); modules it does
# not name follow, in their own order.
DURATIONS = Path(__file__).parent / "durations.json"


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"write each module's seconds (set-up, calls, teardown) to {DURATIONS.name}")  # fmt: skip


def pytest_collection_modifyitems(config, items):
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}

    def seconds(item) -> float:
        return -recorded.get(item.nodeid.split("::")[0].removeprefix("tests/"), 0)

    items.sort(key=seconds)  # stable: the other modules, and the tests in each, keep their order


_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    """Each phase of each test, on the xdist controller too (the workers send it reports)."""
    module = report.nodeid.split("::")[0].removeprefix("tests/")
    _SECONDS[module] = _SECONDS.get(module, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """With --record-durations, on the controller: the modules that ran replace their
    recorded seconds, and modules no longer in tests/ leave the file."""
    if not session.config.getoption("--record-durations") or hasattr(session.config, "workerinput"):
        return
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    recorded.update({module: round(seconds) for module, seconds in _SECONDS.items()})
    kept = {m: s for m, s in recorded.items() if (DURATIONS.parent / m).is_file()}
    DURATIONS.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------- tiny corpora and models


@pytest.fixture(scope="session")
def toy_world(tmp_path_factory):
    """The report's toy world (``longformer_fs/report/recipe_runs.py``), one for the run and
    made of :func:`tokenizer_texts`: its text8, GPT-2 BPE and fairseq releases are the
    suite's. Its fairseq-train and CLI runs go through helpers' in-process runners, which
    isolate fairseq's global state between runs."""
    from longformer_fs.report.recipe_runs import ToyWorld

    class SuiteWorld(ToyWorld):
        @staticmethod
        def fairseq_train(*args) -> None:
            fairseq("fairseq-train", *args)

        @staticmethod
        def command(*argv) -> None:
            ok(*argv)

    return SuiteWorld(shared_root(tmp_path_factory) / "toy_world", prose=tokenizer_texts())


@pytest.fixture(scope="session")
def char_corpus(toy_world):
    """A tiny text8 prepared by ``longformer-fs prep``'s code: 16,000 / 2,000 / 2,000
    characters (``TEXT8_SPLITS``) of ten short words. Its directory is named text8, so its
    parent is a DATA directory for the Makefile's text8 targets."""
    return toy_world.text8() / "text8"


@pytest.fixture(scope="session")
def tiny_char_lm(char_corpus, tmp_path_factory):
    """TINY_CHAR_LM trained 40 updates by fairseq-train on char_corpus, validated after each
    epoch: its checkpoint_last.pt and the run's (train_inner | valid, entry) log lines."""

    def build(save):
        logs = char_lm_logs(char_corpus, "--max-update", "40", "--save-dir", save, "--no-epoch-checkpoints")
        (save / "logs.json").write_text(json.dumps(logs))

    save = built_once(tmp_path_factory, "tiny_char_lm", build)
    return save / "checkpoint_last.pt", [tuple(entry) for entry in json.loads((save / "logs.json").read_text())]


@pytest.fixture(scope="session")
def runs_corpus(tmp_path_factory):
    """fairseq-preprocess'd text of 16 words repeated in runs of 3 to 6 (helpers.runs_text),
    60,000 words to train and 12,000 to validate: a masked word is its neighbours' word,
    which a model can only find if it knows where its neighbours are (positions)."""

    def build(tmp):
        (tmp / "train.txt").write_text(runs_text(60000, 0))
        (tmp / "valid.txt").write_text(runs_text(12000, 1))
        fairseq("fairseq-preprocess", "--only-source", "--trainpref", tmp / "train.txt", "--validpref",
                tmp / "valid.txt", "--destdir", tmp / "bin", "--workers", "1")  # fmt: skip

    return built_once(tmp_path_factory, "runs_corpus", build) / "bin"


@pytest.fixture(scope="session")
def tiny_roberta(runs_corpus, tmp_path_factory):
    """A released-RoBERTa-like directory (model.pt and dict.txt): a 2-layer RoBERTa with 128
    positions trained 600 updates by fairseq-train on runs_corpus. It has learned
    locality: under 2 bits per masked token (uniform guessing is 4). Locality comes late
    and at once: after 300 updates (warm-up 50) the model is still at 3.9 bits, and
    test_longformer_roberta's Table 6 fails."""

    def build(save):
        fairseq("fairseq-train", runs_corpus, "--task", "masked_lm", "--criterion", "masked_lm", "--arch",
                "roberta", *TINY_ROBERTA, "--max-positions", "128", "--tokens-per-sample", "128",
                "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "5e-3",
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100", "--clip-norm", "1.0", "--batch-size", "16",
                "--max-update", "600", "--dropout", "0", "--attention-dropout", "0", "--save-dir", save,
                "--no-epoch-checkpoints", "--disable-validation", "--seed", "1", *ON_CPU, "--log-format", "simple",
                "--log-interval", "100")  # fmt: skip
        (save / "checkpoint_last.pt").rename(save / "model.pt")
        (save / "dict.txt").write_bytes((runs_corpus / "dict.txt").read_bytes())

    return built_once(tmp_path_factory, "tiny_roberta", build)


# ---------------------------------------------------------------- released models, as the hubs ship them
#
# What the journeys start from, built once per test run: released models as their hubs
# ship them, at toy size.
#
# - ``gpt2``: GPT-2-style BPE files (``encoder.json``, ``vocab.bpe``) and a RoBERTa-style
#   ``dict.txt`` over them, trained on English text;
# - ``roberta_base``: fairseq's RoBERTa release layout (``model.pt``, ``dict.txt``), a
#   2-layer RoBERTa trained by fairseq-train over that dictionary;
# - ``bart_base``: fairseq's BART release layout, a 2 + 2-layer BART with BART's 1,024
#   positions trained by fairseq-train, and ``bart_hub``, the same model in HF's layout
#   (``bart-large/`` on the hub);
# - ``longformer_hub`` and ``led_hub``: ``allenai/longformer-base-4096`` and
#   ``allenai/led-large-16384`` as the hub serves them (their position counts, both tokenizer
#   layouts, ``.bin`` or safetensors weights), built by transformers.


def tokenizer_texts() -> list[str]:
    """English to train the tokenizers on: the docs, the licence texts, the releases' words."""
    return [*english(), *REVIEWS.values(), *WIKIPEDIA.values(), " ".join(ARXIV_SENTENCES)]


@pytest.fixture(scope="session")
def gpt2(toy_world) -> Path:
    return toy_world.gpt2()


def bpe_args(gpt2: Path) -> list:
    return ["--encoder-json", gpt2 / "encoder.json", "--vocab-bpe", gpt2 / "vocab.bpe", "--dict", gpt2 / "dict.txt"]


@pytest.fixture(scope="session")
def roberta_base(toy_world) -> Path:
    return toy_world.roberta()


@pytest.fixture(scope="session")
def bart_base(toy_world) -> Path:
    return toy_world.bart()


@pytest.fixture(scope="session")
def bart_hub(bart_base, gpt2, tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "journey_bart_hub", lambda d: bart_as_hf(bart_base, gpt2, d))


@pytest.fixture(scope="session")
def xlmr_tokenizer(tmp_path_factory) -> dict:
    """XLM-R's tokenizer as the hub serves it (hf_models.train_xlmr_tokenizer), trained once
    per run on every other text of five scripts (hf_models.multilingual): ``{"dir": its
    directory, "train": {script: texts it saw}, "held_out": {script: texts it did not}}``."""
    texts = multilingual()
    train = {script: ts[::2] for script, ts in texts.items()}
    held_out = {script: ts[1::2] for script, ts in texts.items()}
    built = built_once(
        tmp_path_factory,
        "xlmr_tokenizer",
        lambda d: train_xlmr_tokenizer([t for ts in train.values() for t in ts], d, 1500),
    )
    return {"dir": built, "train": train, "held_out": held_out}


@pytest.fixture(scope="session")
def hub_tokenizer(tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "journey_hub_tokenizer", lambda d: train_tokenizer(tokenizer_texts(), d, 800))


@pytest.fixture(scope="session")
def longformer_hub(hub_tokenizer, tmp_path_factory) -> Path:
    """``longformer-base-4096/`` at toy width: 4,098 positions, a window per layer (16 and 32:
    8 and 16 a side), ``pytorch_model.bin``, ``tokenizer.json`` and ``vocab.json`` + ``merges.txt``."""
    from transformers import LongformerConfig, LongformerForMaskedLM

    torch.manual_seed(0)  # the same model whichever test asks first
    config = LongformerConfig(vocab_size=vocab_size(hub_tokenizer), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, attention_window=[16, 32],
                              max_position_embeddings=4098, layer_norm_eps=1e-5, type_vocab_size=1)  # fmt: skip
    return built_once(
        tmp_path_factory,
        "journey_longformer_hub",
        lambda d: save_model(scaled(LongformerForMaskedLM(config)), hub_tokenizer, d, weights="bin", tokenizer="both"),
    )


@pytest.fixture(scope="session")
def led_hub(hub_tokenizer, tmp_path_factory) -> Path:
    """``led-large-16384/`` at toy width: 16,384 source positions, windows of 16."""
    from transformers import LEDConfig, LEDForConditionalGeneration

    torch.manual_seed(0)  # the same model whichever test asks first
    config = LEDConfig(vocab_size=vocab_size(hub_tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       attention_window=[16, 16], max_encoder_position_embeddings=16384,
                       max_decoder_position_embeddings=1024)  # fmt: skip
    return built_once(
        tmp_path_factory,
        "journey_led_hub",
        lambda d: save_model(scaled(LEDForConditionalGeneration(config)), hub_tokenizer, d),
    )
