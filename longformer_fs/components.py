"""The plugin's fairseq components: importing this module registers its models, tasks,
criterions and learning-rate schedule with fairseq, and prepares the process for
fairseq's commands.

The package imports it when fairseq is loaded (:mod:`.registration`): fairseq imports a
user dir's package first, and a script may import either first. The subpackages
(``models``, ``tasks``, ``criterions``) register their own members when imported and
never import this module, so the registration has no import cycle.

What registering also does, once per process:

- fairseq's commands load these models' checkpoints, whose argparse-style settings pickle
  an ``argparse.Namespace``; it is allowed
  (:func:`~longformer_fs.fairseq_format.allow_argparse_checkpoints`);
- a fairseq run that stops before the end of an epoch (``--max-update``) may leave its
  batch loader thread inside a torch call when the interpreter exits, which aborts a
  finished run; the loaders are stopped at exit (:func:`~.launch.stop_batch_loaders`), in
  every process that loads the plugin: ``fairseq-train --user-dir``,
  ``fairseq-hydra-train``, torchrun's and fairseq's own spawned processes;
- fairseq's blocking of repeated n-grams, which blocks nothing without its CUDA extension,
  is fixed (:mod:`.generation_fixes`): ``summarize``, the hubs and ``fairseq-generate``;
- the attention's ``auto`` reads what ``longformer-fs check`` verified and measured on this
  machine (:func:`~.verification.use_records`), which the plain-PyTorch core is not told of
  by itself.
"""

import atexit

from . import criterions, launch, lr_scheduler, models, tasks  # noqa: F401
from .fairseq_format import allow_argparse_checkpoints
from .generation_fixes import fix_ngram_blocking
from .verification import use_records

allow_argparse_checkpoints()
fix_ngram_blocking()
use_records()
# Exit functions run before the interpreter ends daemon threads, the loaders among them.
atexit.register(lambda: launch.stop_batch_loaders())
