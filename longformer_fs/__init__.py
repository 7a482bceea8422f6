"""longformer-fs: Longformer attention, kernels and recipes as a fairseq plugin.

Load it with ``fairseq-train --user-dir longformer_fs`` (or ``common.user_dir`` under
``fairseq-hydra-train``). The attention core, :mod:`longformer_fs.attention`, is plain
PyTorch and can be used without fairseq.

Importing this package imports neither torch nor fairseq, so that ``longformer-fs --help``
starts at once. It acts on them when they load instead, whatever loads them: the plugin's
models, tasks and criterions are registered with fairseq as soon as fairseq is imported
(at once, when fairseq is already there: fairseq loading this package as a user dir).
"""

import argparse
import contextlib
import importlib.abc
import importlib.util
import logging
import sys
import warnings

from .version import __version__


class _WhenImported(importlib.abc.MetaPathFinder):
    """Runs ``hook(module)``, a context manager, around the first import of a top-level
    module: the code before its ``yield`` before the module executes, the rest after."""

    def __init__(self):
        self.hooks = {}  # module name -> hook
        self.finding = False

    def add(self, name: str, hook) -> None:
        if name in sys.modules:
            with hook(sys.modules[name]):
                pass
        else:
            self.hooks[name] = hook

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks or self.finding:
            return None
        self.finding = True  # the other finders locate the module; this one only wraps it
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding = False
        if spec is None or spec.loader is None:
            return spec
        hook, loader = self.hooks.pop(name), spec.loader

        def exec_module(module):
            del loader.exec_module  # the loader's own method again, for reloads
            with hook(module):
                loader.exec_module(module)

        loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _torch_loaded(torch):
    yield
    # torch >= 2.6 loads checkpoints with weights_only=True, and fairseq checkpoints written
    # before Hydra (RoBERTa's among them) pickle their args as an argparse.Namespace.
    torch.serialization.add_safe_globals([argparse.Namespace])


@contextlib.contextmanager
def _fairseq_loaded(fairseq):
    """fairseq's import without its side effects on the user's process, then the plugin
    registered with it.

    fairseq/tasks/text_to_speech.py configures the root logger when imported, which
    would turn on DEBUG output of every library in the user's process. Under
    fairseq-train the root logger is configured first and nothing changes.
    """
    root = logging.getLogger()
    level, handlers, disabled = root.level, list(root.handlers), root.manager.disable
    logging.disable(logging.INFO)
    try:
        with warnings.catch_warnings():
            # fairseq imports fairscale (its FSDP) when installed, whose import-time
            # torch.cuda.amp deprecation warnings say nothing about the user's code.
            warnings.filterwarnings("ignore", category=FutureWarning, module="fairscale")
            yield
    finally:
        logging.disable(disabled)
        root.setLevel(level)
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
    # fairseq auto-imports only models/ and tasks/ of a user dir, and none of them when the
    # package was imported before (say by `python -m longformer_fs.launch`): import all
    # of them here, or the criterions' and the schedule's registrations, or all, never happen.
    from . import criterions, lr_scheduler, models, tasks  # noqa: F401


_WHEN_IMPORTED = _WhenImported()
sys.meta_path.insert(0, _WHEN_IMPORTED)
_WHEN_IMPORTED.add("torch", _torch_loaded)
_WHEN_IMPORTED.add("fairseq", _fairseq_loaded)

__all__ = ["__version__"]
