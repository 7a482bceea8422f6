"""When the plugin registers with fairseq.

fairseq finds our models, tasks and criterions in its registries, which importing
:mod:`.components` fills; fairseq's loaders also need torch to accept the
``argparse.Namespace`` that many checkpoints pickle. Both need fairseq, which takes seconds
to import. So importing the package registers at once only where fairseq is already loaded
(``fairseq-train --user-dir``, a script that imported fairseq first); otherwise
:func:`register_when_fairseq_loads` waits for fairseq: a one-shot import hook that lets
fairseq's own import run, then imports :mod:`.components`, and is gone. Either way
``import longformer_fs``, before or after ``import fairseq``, leaves fairseq able to load
every checkpoint of ours, and a process that never imports fairseq (the command line's
``--help``, ``prep``'s workers) pays nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_FAIRSEQ = "fairseq"


def register_when_fairseq_loads() -> None:
    """Register now if fairseq is loaded, else once it is (at most one hook is installed)."""
    if _FAIRSEQ in sys.modules:
        importlib.import_module(f"{__package__}.components")
    elif not any(isinstance(finder, _AfterFairseq) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterFairseq())


class _AfterFairseq(importlib.abc.MetaPathFinder):
    """Finds fairseq as the other finders do, with a loader that registers the plugin once
    fairseq's module has run; removes itself at the first import of fairseq."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _FAIRSEQ:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """fairseq's own loader, then the registration; the module keeps its own loader."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self._loader  # no trace of this hook
        self._loader.exec_module(module)
        importlib.import_module(f"{__package__}.components")
