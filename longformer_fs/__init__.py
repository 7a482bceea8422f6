"""longformer-fs: Longformer attention, kernels and recipes as a fairseq plugin.

Load it with ``fairseq-train --user-dir longformer_fs`` (or ``common.user_dir`` under
``fairseq-hydra-train``). The attention core, :mod:`longformer_fs.attention`, is plain
PyTorch and can be used without fairseq.
"""

import argparse
import logging
import warnings

import torch

from .version import __version__

# torch >= 2.6 loads checkpoints with weights_only=True, and fairseq checkpoints written
# before Hydra (RoBERTa's among them) pickle their args as an argparse.Namespace.
torch.serialization.add_safe_globals([argparse.Namespace])


def _import_fairseq() -> bool:
    """Import fairseq without its import-time side effects on the user's process.

    fairseq/tasks/text_to_speech.py configures the root logger when imported, which
    would turn on DEBUG output of every library in the user's process. Under
    fairseq-train the root logger is configured first and nothing changes.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    logging.disable(logging.INFO)
    try:
        with warnings.catch_warnings():
            # fairseq imports fairscale (its FSDP) when installed, whose import-time
            # torch.cuda.amp deprecation warnings say nothing about the user's code.
            warnings.filterwarnings("ignore", category=FutureWarning, module="fairscale")
            import fairseq  # noqa: F401
    except ImportError:
        return False
    finally:
        logging.disable(logging.NOTSET)
        root.setLevel(level)
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
    return True


if _import_fairseq():
    # fairseq auto-imports only models/ and tasks/ of a user dir; criterions must be
    # imported here or their registrations never happen. Importing all three here
    # also registers them when this package was imported before fairseq loaded it.
    from . import criterions, models, tasks  # noqa: F401

__all__ = ["__version__"]
