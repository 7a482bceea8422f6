"""Run fairseq-train or fairseq-hydra-train as one process of a ``torchrun`` job, or
alone, and end it cleanly.

fairseq's own distributed training (DDP, legacy DDP, FSDP) does the work; under
``torchrun`` this module only tells it what ``torchrun`` already knows, which fairseq
cannot infer on every machine (docs/design.md §3):

- on CPU, ``torchrun ... fairseq-train --cpu`` without the world size silently runs N
  independent trainings, and with it fairseq divides the rank by the CUDA device count
  (zero); its default DDP wrapper passes ``device_ids=[0]``, which DDP refuses for CPU
  modules. So each process gets its rank, the world size, ``env://`` initialisation
  (torchrun's ``MASTER_ADDR``/``MASTER_PORT``), no spawning, gloo, and ``legacy_ddp``
  (or the ``--ddp-backend`` the user gave, e.g. ``fully_sharded``);
- on GPUs, the same, with NCCL and the local rank as the CUDA device: one command for a
  node or many nodes.

Outside ``torchrun`` (none of its variables set) the command runs as it would alone.

Either way the run ends cleanly (:func:`stop_batch_loaders`): fairseq loads batches in a
daemon thread, and when training stops before the epoch ends that thread may still be
inside a torch call when the interpreter shuts down. CPython then ends the thread with a
forced unwind that meets pybind11's ``noexcept`` GIL guard, and the process aborts
("terminate called without an active exception") after a run that finished: torchrun and
cluster schedulers report the job as failed. So the loader is stopped and joined first:
here when the command returns or fails, and, in every process that loads the plugin
(plain ``fairseq-train --user-dir`` too), at exit (:mod:`.components`).

Usage (``--no-python``-free, any number of nodes)::

    torchrun --nproc_per_node 8 -m longformer_fs.launch fairseq-train DATA --user-dir longformer_fs ...
    torchrun --nnodes 4 --nproc_per_node 8 --rdzv-endpoint HOST:29500 -m longformer_fs.launch \\
        fairseq-hydra-train --config-dir recipes/char_lm --config-name small_phase1 task.data=DATA
    python -m longformer_fs.launch fairseq-hydra-train --config-dir recipes/char_lm ...  # one process
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

from . import devices

TOOLS = ("fairseq-train", "fairseq-hydra-train")
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class LaunchError(ValueError):
    """The launcher was started outside torchrun, or without a fairseq command."""


def _on_cpu(tool: str, args: list[str]) -> bool:
    if tool == "fairseq-train":
        return "--cpu" in args or not devices.cuda_runtime()
    return any(a.replace("+", "", 1) in ("common.cpu=true", "common.cpu=True") for a in args) or (
        not devices.cuda_runtime()
    )


def _given(tool: str, args: list[str], name: str) -> bool:
    if tool == "fairseq-train":
        flag = "--" + name.replace("_", "-")
        return any(a == flag or a.startswith(flag + "=") for a in args)
    return any(a.lstrip("+").startswith(f"distributed_training.{name}=") for a in args)


def distributed_arguments(tool: str, args: list[str], env: dict) -> list[str]:
    """The fairseq arguments (flags or Hydra overrides) this process needs: none outside
    torchrun (none of its variables in ``env``)."""
    missing = [key for key in _ENV if key not in env]
    if len(missing) == len(_ENV):
        return []
    if missing:
        raise LaunchError(
            f"launch: {', '.join(missing)} not set (but {', '.join(k for k in _ENV if k in env)} are); start this "
            "under torchrun (torchrun --nproc_per_node N -m longformer_fs.launch fairseq-train ...)"
        )
    cpu = _on_cpu(tool, args)
    settings = {
        "distributed_rank": env["RANK"],
        "distributed_world_size": env["WORLD_SIZE"],
        "distributed_init_method": "env://",
        "distributed_no_spawn": "true",
        "distributed_backend": "gloo" if cpu else "nccl",
        "device_id": "0" if cpu else env["LOCAL_RANK"],
    }
    if cpu:
        settings["ddp_backend"] = "legacy_ddp"  # fairseq's pytorch_ddp passes device_ids, refused on CPU
    settings = {k: v for k, v in settings.items() if not _given(tool, args, k)}
    if tool == "fairseq-train":
        out = []
        for key, value in settings.items():
            flag = "--" + key.replace("_", "-")
            out += [flag] if value == "true" else [flag, value]
        return out
    return [f"distributed_training.{key}={value}" for key, value in settings.items()]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TOOLS:
        raise LaunchError(f"launch: expected {' or '.join(TOOLS)} and its arguments, got {argv[:1] or 'nothing'}")
    tool, args = argv[0], argv[1:]
    args += distributed_arguments(tool, args, dict(os.environ))
    # Importing fairseq registers the plugin, whose package fairseq then skips as a user
    # dir already imported (longformer_fs.registration).
    if tool == "fairseq-train":
        from fairseq_cli.train import cli_main
    else:
        from fairseq_cli.hydra_train import cli_main

    sys.argv = [tool, *args]
    try:
        cli_main()
    finally:  # a failed run too: its exception, not an abort, decides the exit status
        stop_batch_loaders()
    return 0


def stop_batch_loaders(timeout: float = 60.0) -> int:
    """Stop fairseq's background batch loaders and wait for them to finish; returns how
    many were running.

    A loader (``fairseq.data.iterators.BackgroundConsumer``) puts batches into a bounded
    queue until it has put ``_max_len`` of them. With that bound lowered it stops after the
    batch it is making; emptying the queue makes room for that batch and for its final
    sentinel, so the thread returns instead of waiting for a reader that has gone. A loader
    still running after ``timeout`` seconds (a hung data worker) is left behind.
    """
    from fairseq.data.iterators import BackgroundConsumer

    loaders = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]
    deadline = time.monotonic() + timeout
    for loader in loaders:
        loader._max_len = 0
        while loader.is_alive() and time.monotonic() < deadline:
            try:
                while True:
                    loader._queue.get_nowait()
            except queue.Empty:
                pass
            loader.join(0.05)
    return len(loaders)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LaunchError as err:
        print(f"longformer-fs launch: error: {err}", file=sys.stderr)
        sys.exit(2)
