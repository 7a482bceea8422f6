"""The check above the attention core: ``longformer-fs check`` and what it leaves behind.

- :mod:`.kernel_check`: the compiled kernels, and FlashAttention's window, against float64
  on the user's device;
- :mod:`.backend_speed`: the forward+backward time of each backend ``auto`` could take there;
- :mod:`.records`: both, recorded per device and extension build, and read back as the
  core's evidence (:class:`~longformer_fs.attention.evidence.Evidence`).

The core imports nothing of this package; :func:`use_records` hands it the records, as the
plugin does when fairseq loads it (:mod:`longformer_fs.components`) and the command line
does for the commands that run attention without fairseq (:mod:`longformer_fs.cli`).
"""

from .records import use_records

__all__ = ["use_records"]
