"""longformer-fs: Longformer attention, kernels and recipes as a fairseq plugin.

Load it with ``fairseq-train --user-dir longformer_fs`` (or ``common.user_dir`` under
``fairseq-hydra-train``): fairseq imports this package, which registers the plugin's
models, tasks, criterions and learning-rate schedule with it (:mod:`.components`), and
does nothing else. Imported without fairseq, it imports neither torch nor fairseq and
changes nothing, so the command line and the data-preparation workers start at once;
importing any of its fairseq adapters (``longformer_fs.models``, ``.tasks``,
``.criterions``) registers them all. The attention core, :mod:`longformer_fs.attention`,
is plain PyTorch and can be used without fairseq.
"""

import sys

from .version import __version__

if "fairseq" in sys.modules:  # fairseq is loading this package as a user dir
    from . import components  # noqa: F401

__all__ = ["__version__"]
