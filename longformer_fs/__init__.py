"""longformer-fs: Longformer attention, kernels and recipes as a fairseq plugin.

Load it with ``fairseq-train --user-dir longformer_fs`` (or ``common.user_dir`` under
``fairseq-hydra-train``). The attention core, :mod:`longformer_fs.attention`, is plain
PyTorch and can be used without fairseq.
"""

import argparse

import torch

from .version import __version__

# torch >= 2.6 loads checkpoints with weights_only=True, and fairseq checkpoints written
# before Hydra (RoBERTa's among them) pickle their args as an argparse.Namespace.
torch.serialization.add_safe_globals([argparse.Namespace])

try:
    import fairseq  # noqa: F401
except ImportError:  # the attention core stays usable without fairseq
    pass
else:
    # fairseq auto-imports only models/ and tasks/ of a user dir; criterions must be
    # imported here or their registrations never happen.
    from . import criterions, models, tasks  # noqa: F401

__all__ = ["__version__"]
