"""The package as fairseq and torch see it: user-dir loading, old checkpoints, logging."""

import os
import subprocess  # registration depends on what a new process imports first
import sys
from pathlib import Path

import pytest
from helpers import BIN, cli_code, command

ROOT = Path(__file__).resolve().parents[1]
LOAD_USER_DIR = (
    "import argparse\n"
    "from fairseq import utils\n"
    f"utils.import_user_module(argparse.Namespace(user_dir={str(ROOT / 'longformer_fs')!r}))\n"
)
# Prints the plugin's names that fairseq's registries lack (none: an empty line).
MISSING_REGISTRATIONS = (
    "from fairseq.criterions import CRITERION_REGISTRY\n"
    "from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY\n"
    "from fairseq.tasks import TASK_REGISTRY\n"
    "expected = {\n"
    "    'model': (MODEL_REGISTRY, ['longformer_lm', 'longformer_roberta', 'led']),\n"
    "    'arch': (ARCH_MODEL_REGISTRY, ['longformer_lm_small', 'longformer_roberta_base', 'led_base']),\n"
    "    'task': (TASK_REGISTRY, ['longformer_char_lm', 'longformer_qa', 'longformer_wikihop']),\n"
    "    'criterion': (CRITERION_REGISTRY, ['bpc_cross_entropy', 'longformer_qa', 'longformer_wikihop']),\n"
    "}\n"
    "print(' '.join(f'{kind}:{n}' for kind, (reg, names) in expected.items() for n in names if n not in reg))\n"
)


def python(code: str, interpreter: str = sys.executable) -> subprocess.CompletedProcess:
    """``python -c CODE``: this venv's interpreter, or conftest's ``fresh_python``."""
    return subprocess.run([interpreter, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


# What a process imports first, by case: whatever it is, the plugin must end up registered.
FIRST_IMPORTS = {
    # Each fairseq-facing subpackage first: fairseq's import, and so the registration, starts inside it.
    "models": "import longformer_fs.models\n",
    "tasks": "import longformer_fs.tasks\n",
    "criterions": "import longformer_fs.criterions\n",
    # A checkpoint loader (what every eval-* command imports).
    "a-loader": "import longformer_fs.checkpoint\n",
}
# fairseq loading the package as a user dir (fairseq-train --user-dir): which package, and
# whether the subpackages came with it.
USER_DIR = (
    LOAD_USER_DIR + "import sys\n"
    "print(sys.modules['longformer_fs'].__file__)\n"
    "print(all(f'longformer_fs.{p}' in sys.modules for p in ('models', 'tasks', 'criterions')))\n"
)


COMMAND_HELP = cli_code("convert-roberta", "--help")


@pytest.fixture(scope="module")
def registrations(fresh_python):
    """Each case's fresh interpreter (conftest's fresh_python: fairseq and the plugin not yet
    imported), fairseq's user-dir loading, a command's help and fairseq-train's, all
    started together: ``{case: (exit code, stdout, stderr)}``. The command's help is a new
    interpreter: what any import prints (torch's, NumPy's, fairseq's) must not reach its
    stderr. fairseq-train's help is the warm start (helpers.command): it checks fairseq's
    parser, not a fresh import, which the other cases check. (Checked: with
    ``register_when_fairseq_loads()`` taken out of ``longformer_fs/__init__.py``, every
    case here misses registrations, and the same ones, in fresh_python as in new
    interpreters of this venv.)"""
    commands = {case: [fresh_python, "-c", first + MISSING_REGISTRATIONS] for case, first in FIRST_IMPORTS.items()}
    commands["user-dir"] = [fresh_python, "-c", USER_DIR + MISSING_REGISTRATIONS]
    commands["command-help"] = [sys.executable, "-c", COMMAND_HELP]
    commands["fairseq-train-help"] = command([BIN / "fairseq-train", "--user-dir", "longformer_fs", "--help"])
    processes = {
        case: subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for case, cmd in commands.items()
    }
    outputs = {case: proc.communicate(timeout=300) for case, proc in processes.items()}
    return {case: (processes[case].returncode, *outputs[case]) for case in processes}


def test_fairseq_loads_the_user_dir(registrations):
    code, out, err = registrations["user-dir"]
    assert code == 0, err
    path, subpackages, *missing = out.split()
    assert Path(path).resolve() == ROOT / "longformer_fs" / "__init__.py"
    assert subpackages == "True"
    assert missing == []


@pytest.mark.parametrize("first", FIRST_IMPORTS)
def test_the_plugin_registers_whatever_imports_fairseq_first(first, registrations):
    code, out, err = registrations[first]
    assert code == 0, err
    assert out.split() == []


def test_importing_the_package_or_the_command_line_imports_neither_torch_nor_fairseq():
    result = python(
        "import sys\n"
        "import longformer_fs.cli\n"
        "print(sorted(m for m in ('torch', 'fairseq', 'transformers', 'matplotlib') if m in sys.modules))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_fairseq_train_accepts_user_dir(registrations):
    code, out, err = registrations["fairseq-train-help"]
    assert code == 0, err
    assert "--user-dir" in out


def test_importing_the_package_waits_for_fairseq_and_changes_nothing_else(fresh_python):
    """The package alone registers nothing (fairseq is not there): it adds one import hook,
    which registers the plugin once fairseq is imported and leaves with it, and leaves
    torch.load's safe globals, logging and warnings filters as they were."""
    result = python(
        "import logging, sys, warnings\n"
        "import torch\n"
        "def state():\n"
        "    root = logging.getLogger()\n"
        "    return (list(warnings.filters), list(torch.serialization.get_safe_globals()),\n"
        "            root.level, list(root.handlers), logging.root.manager.disable)\n"
        "before, hooks = state(), list(sys.meta_path)\n"
        "import longformer_fs\n"
        "added = [type(f).__name__ for f in sys.meta_path if f not in hooks]\n"
        "print(state() == before, 'fairseq' in sys.modules, added)\n"
        "import fairseq\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "left = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_AfterFairseq']\n"
        "print(left, 'longformer_char_lm' in TASK_REGISTRY, type(fairseq.__loader__).__name__)\n",
        fresh_python,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", "['_AfterFairseq']", "[]", "True", "SourceFileLoader"]


def test_importing_the_package_first_leaves_fairseqs_loader_able_to_load_our_checkpoints(
    tiny_char_lm, longformer_hub, tmp_path, fresh_python
):
    """The natural first lines of a notebook: the plugin, then fairseq's own loader, on a
    trained character LM and on an import-hf output (its settings pickle a Namespace)."""
    from helpers import ok

    ok("import-hf", longformer_hub, "--out", tmp_path / "imported")
    code = (
        "import longformer_fs\n"
        "from fairseq import checkpoint_utils\n"
        "for path, data in {cases!r}:\n"
        "    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=data)\n"
        "    print(type(models[0]).__name__, type(task).__name__)\n"
    ).format(cases=[(str(tiny_char_lm[0]), {}), (str(tmp_path / "imported" / "model.pt"), {})])
    result = python(code, fresh_python)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["LongformerLanguageModel", "CharLMTask", "LongformerRobertaModel", "MaskedLMTask"]


def test_loaders_and_registration_read_checkpoints_that_pickle_a_namespace(tmp_path, fresh_python):
    """Pre-Hydra fairseq checkpoints (and flag-trained ones of argparse-style models) pickle
    an argparse.Namespace, which torch>=2.6 refuses; our loaders, and the registration with
    fairseq (whose commands load them), allow it. Three fresh interpreters, side by side."""
    import argparse

    import torch

    ckpt = tmp_path / "old.pt"
    torch.save({"args": argparse.Namespace(arch="roberta_base")}, ckpt)
    load = f"import torch; print(torch.load({str(ckpt)!r})['args'].arch)"
    allow = "from longformer_fs.fairseq_format import allow_argparse_checkpoints as a; a(); "
    cases = {"import longformer_fs; ": False, "import longformer_fs.models; ": True, allow: True}
    processes = {
        first: subprocess.Popen([fresh_python, "-c", first + load], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        for first in cases
    }  # fmt: skip
    for first, loads in cases.items():
        out, err = processes[first].communicate(timeout=300)
        assert (processes[first].returncode == 0) == loads, err
        assert loads or "weights_only" in err  # the failure the loaders fix
        assert not loads or out.strip() == "roberta_base"


def test_commands_print_their_own_output_only(registrations):
    """fairseq configures logging at import and fairscale warns: a command that imports
    them prints its help and nothing else."""
    code, out, err = registrations["command-help"]
    assert code == 0 and "--max-positions" in out
    assert err == ""


def test_make_install_is_a_fast_no_op():
    if not (ROOT / ".venv" / ".installed").exists() or os.environ.get("VIRTUAL_ENV_DISABLE_MAKE_CHECK"):
        pytest.skip("the venv was not created by `make install`")
    result = subprocess.run(["make", "-q", "install"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, "make install would redo work although nothing changed"
