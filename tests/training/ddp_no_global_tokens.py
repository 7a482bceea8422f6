"""Run by tests/training/test_distributed.py under torchrun: two training steps of a real
DistributedDataParallel (gloo, find_unused_parameters=False) over a Longformer layer
whose batch has no global token.

Arguments: ``trainable|frozen`` (the global projections) and ``touch|no-touch`` (keep or
remove the layer's zero-cost use of them, the control).
"""

import faulthandler
import sys

import torch
import torch.distributed as dist

from longformer_fs.attention import LongformerSelfAttention


def main(globals_: str, touch: str) -> None:
    faulthandler.dump_traceback_later(120, exit=True)  # a hang fails the test with stacks, not the CI job
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layer = LongformerSelfAttention(16, 2, window=2)
    for projection in layer.global_projections():
        projection.requires_grad_(globals_ == "trainable")
    if touch == "no-touch":
        layer._touch_global_projections = lambda x: x.new_zeros(())
    model = torch.nn.parallel.DistributedDataParallel(layer)
    for _ in range(2):
        model(torch.randn(10, 2, 16)).sum().backward()
    print("two steps done", flush=True)
    # No destroy_process_group: with gloo on this torch, tearing the group down while the
    # other rank is still in it has hung the exit; the process end releases it.
    dist.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:])
