"""What ``torch.compile`` is told about the attention code.

:func:`constant_when_traced` is ``torch.compiler.assume_constant_result`` without its
import: that decorator imports ``torch._dynamo``, about a second at every start of every
process that imports the attention (each ``longformer-fs`` command, each fairseq run),
compiled or not, only to set the one attribute below. ``tests/attention/test_custom_ops.py``
holds the two equal, so a torch that marks functions otherwise fails there.
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def constant_when_traced(fn: F) -> F:
    """Mark ``fn`` as ``torch.compiler.assume_constant_result`` does: traced code takes its
    result as a constant of the graph instead of tracing into it."""
    fn._dynamo_marked_constant = True  # what torch._dynamo.decorators.assume_constant_result sets
    return fn
