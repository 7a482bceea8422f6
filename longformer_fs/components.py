"""The plugin's fairseq components: importing this module registers its models, tasks,
criterions and learning-rate schedule with fairseq.

fairseq imports a user dir's package, then that package's ``models/`` and ``tasks/``, and
none of it when the package was imported before (as under ``python -m
longformer_fs.launch``). So whatever comes first registers everything: the package when
fairseq is loaded, each fairseq-facing subpackage (``models``, ``tasks``, ``criterions``),
the launcher and the checkpoint loaders import this module.

fairseq's commands then load these models' checkpoints, whose argparse-style settings
pickle an ``argparse.Namespace``; registering allows that
(:func:`~longformer_fs.models.checkpoints.allow_argparse_checkpoints`).
"""

from . import criterions, lr_scheduler, models, tasks  # noqa: F401
from .models.checkpoints import allow_argparse_checkpoints

allow_argparse_checkpoints()
