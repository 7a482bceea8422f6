"""What an export refuses: the user's checkpoint or settings, in one line.

Only these are the user's errors; anything else an export raises is ours, and keeps its
traceback.
"""


class ExportError(ValueError):
    """The checkpoint, or a setting, cannot be exported; the message says why and what to pass."""


class OnnxExportError(ExportError):
    """The checkpoint cannot be served as ONNX, or its file disagrees with PyTorch."""
