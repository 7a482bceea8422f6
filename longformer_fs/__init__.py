"""longformer-fs: Longformer attention, kernels and recipes as a fairseq plugin.

Load it with ``fairseq-train --user-dir longformer_fs`` (or ``common.user_dir`` under
``fairseq-hydra-train``), or import it: the package registers the plugin's models, tasks,
criterions and learning-rate schedule with fairseq (:mod:`.components`) when fairseq is
loaded, now or later (:mod:`.registration`), so fairseq's own loaders read every
checkpoint of ours whichever was imported first. Until fairseq is imported it imports
neither torch nor fairseq, so the command line and the data-preparation workers start at
once. :func:`from_pretrained` loads a checkpoint with the hub interface of its kind. The
attention core, :mod:`longformer_fs.attention`, is plain PyTorch and can be used without
fairseq.
"""

from .registration import register_when_fairseq_loads
from .version import __version__

register_when_fairseq_loads()

__all__ = ["__version__", "from_pretrained"]


def from_pretrained(model_name_or_path, checkpoint_file="model.pt", data_name_or_path=None, **kwargs):
    """A checkpoint of ours with the hub interface of its kind (:func:`longformer_fs.hub.from_pretrained`)."""
    from .hub import from_pretrained as load  # imports torch and fairseq: only when called

    return load(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
