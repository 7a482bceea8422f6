"""Warm starts for the suite's processes: fairseq's and our commands without their imports.

A process of ``fairseq-train`` or ``longformer-fs`` spends about 9 s of this machine's
time importing torch, fairseq (scikit-learn, SciPy, pandas through it) and transformers
before it does anything; the suite starts hundreds. Measured on CI's kind of machine (2
cores, ``make test``, 1,537 tests, 2026-12-03, both runs with a warm compiler cache): 863 s
with the zygote, 1,277 s with ``LFS_COLD_STARTS=1`` (1,681 s of CPU time against 2,497), so
it stays.

The zygote imports them once per test run (one server for the xdist workers) and then forks
a child for each command: the child takes the caller's standard streams (passed over a Unix
socket), working directory, environment and arguments, runs the command's own entry point,
and exits with its status. The shims (:func:`write_shims`), put first on ``PATH`` and in the
journeys' venv, send the commands here; anything else, or any command when no zygote runs,
is executed as it always was.

Commands keep their meaning: the same entry points, a fresh fork of a process that never
computed (no thread pool to inherit), logging reset to a new interpreter's before the
command configures it, the caller's streams and exit status, and a new interpreter's
start and end (SIGPIPE ignored, numpy's and torch's generators seeded anew, non-daemon
threads joined at the end, where one still running fails the command; a shim killed takes
its command with it: tests/test_warm_starts.py). What a fork of this server cannot give
is a new interpreter's import order and its C++ shutdown: the cold lane
(tests/test_cold_lane.py), and tests of imports that torch must not be among, start real
processes (``real=True``).

The plugin's registration depends on what a process imports first, of fairseq and the
plugin: its tests run ``python -c`` in a second kind of server (``--fresh``), which has
imported only the libraries under them (torch, NumPy, scikit-learn, SciPy, pandas: 5 of
fairseq's 7 s of imports here), never fairseq, transformers or the plugin
(:data:`FRESH_PRELOAD`; conftest's ``fresh_python``). What both servers fix at their start
is theirs, not the request's: settings read once at import (``PYTHONWARNINGS``,
``TORCH_*``), and what their imports printed (in the server's log).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

# Commands run here: the console scripts, and ``python -m`` of these packages.
TOOLS = {
    "fairseq-train": "fairseq_cli.train:cli_main",
    "fairseq-hydra-train": "fairseq_cli.hydra_train:cli_main",
    "fairseq-preprocess": "fairseq_cli.preprocess:cli_main",
    "fairseq-generate": "fairseq_cli.generate:cli_main",
    "fairseq-interactive": "fairseq_cli.interactive:cli_main",
    "fairseq-eval-lm": "fairseq_cli.eval_lm:cli_main",
    "fairseq-validate": "fairseq_cli.validate:cli_main",
    "longformer-fs": "longformer_fs.cli:main",
    "torchrun": "torch.distributed.run:main",  # its workers start as sys.executable -u -m ...: warm too
}
MODULES = ("longformer_fs", "fairseq_cli")
TESTS = Path(__file__).resolve().parent  # and ``python SCRIPT`` of the tests' own scripts
ENV = "LFS_ZYGOTE"
# The fresh server: what it imports before forking (third-party libraries only), the
# address its shim reads, and the shim's tool name.
FRESH_PRELOAD = ("torch", "numpy", "sklearn.metrics", "scipy.stats", "pandas")
FRESH_ENV = "LFS_FRESH_PYTHON"
FRESH = "python-fresh"
STARTING = ".starting"  # beside the socket while the zygote imports


# ------------------------------------------------------------------------------ the client


def client(tool: str, real: str) -> None:
    """A shim's body: run ``tool`` (``sys.argv[1:]``) in the zygote, or ``real`` itself."""
    args = sys.argv[1:]
    address = os.environ.get(FRESH_ENV if tool == FRESH else ENV)
    plain = args[1:] if tool == "python" and args[:1] == ["-u"] else args  # torchrun's workers: unbuffered
    if tool == FRESH:
        routed = len(args) >= 2 and args[0] == "-c"
    else:
        routed = (
            tool != "python"
            or (len(plain) >= 2 and plain[0] == "-m" and plain[1].split(".")[0] in MODULES)
            or (bool(plain) and _is_test_script(plain[0]))
        )
    if not address or not routed:
        os.execv(real, [real, *args])
    if plain is not args:
        os.environ["PYTHONUNBUFFERED"] = "1"
        args = plain
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(600):  # while the zygote is still importing (at most 30 s), wait: it is quicker
        if os.path.exists(address) or not os.path.exists(address + STARTING):
            break
        time.sleep(0.05)
    try:
        connection.connect(address)
    except OSError:
        os.execv(real, [real, *args])
    # The child's sys.executable: this shims' python, so that what it starts in turn (a
    # command found next to the interpreter, python -m ...) starts warm too; a fresh
    # interpreter's is the real one, beside the venv's commands.
    python = real if tool == FRESH else os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "python")
    request = {"tool": tool, "args": args, "cwd": os.getcwd(), "env": dict(os.environ), "executable": python}
    request = json.dumps(request).encode()
    socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
    reader = connection.makefile("r")
    pid = int(reader.readline())
    import signal

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda n, _: os.kill(pid, n))
    status = int(reader.readline() or "-9")
    if status < 0:  # the same signal ends this process (SIGKILL's disposition cannot be set)
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


def _is_test_script(arg: str) -> bool:
    return arg.endswith(".py") and Path(arg).resolve().is_relative_to(TESTS) and Path(arg).is_file()


def write_shims(directory: Path, real_bin: Path) -> Path:
    """Shims for :data:`TOOLS` and ``python`` in ``directory``, each falling back to its
    namesake in ``real_bin``; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in [*TOOLS, "python", "python3"]:
        _write_shim(directory / name, "python" if name.startswith("python") else name, real_bin / name, real_bin)
    return directory


def write_fresh_shim(path: Path, real_bin: Path) -> Path:
    """A ``python`` at ``path`` whose ``-c`` runs go to the fresh server (:data:`FRESH_ENV`)."""
    return _write_shim(path, FRESH, real_bin / "python", real_bin)


def _write_shim(path: Path, tool: str, real: Path, real_bin: Path) -> Path:
    path.write_text(
        f"#!{real_bin / 'python'} -S\nimport sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        f"from zygote import client\nclient({tool!r}, {str(real)!r})\n"
    )
    path.chmod(0o755)
    return path


def start(root: Path, python: Path, fresh: bool = False):
    """A server (``fresh``: the fresh kind) run by the venv's real ``python`` (never a shim,
    which would send it to the zygote), listening in ``root`` and logging to a file there:
    ``(its Popen, its socket's address)``. Until it listens, commands sent to it wait
    (:data:`STARTING`). Closing its stdin stops it."""
    import subprocess  # here, not at the top: every shim imports this module

    name = "fresh" if fresh else "zygote"
    address = str(root / f"{name}.socket")
    Path(address + STARTING).touch()
    with open(root / f"{name}.log", "w") as log:
        server = subprocess.Popen([str(python), str(TESTS / "zygote.py"), address, *(["--fresh"] if fresh else [])],
                                  stdin=subprocess.PIPE, stdout=log, stderr=log, cwd=TESTS.parent)  # fmt: skip
    return server, address


# ------------------------------------------------------------------------------ the server


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        body += connection.recv(size - len(body))
    return json.loads(body), list(fds)


def _run(request: dict) -> int:
    """In the child: the command, as its console script or ``python -m`` runs it."""
    import importlib
    import logging
    import runpy

    tool, args = request["tool"], request["args"]
    root = logging.getLogger()
    for handler in root.handlers[:]:  # a new interpreter's logging: the command sets its own
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        if tool == FRESH:  # python -c CODE ARGS, as a new interpreter runs it
            import types

            sys.argv = ["-c", *args[2:]]
            sys.path.insert(0, "")
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(args[1], "<string>", "exec", dont_inherit=True), main.__dict__)  # no __future__ of ours
        elif tool == "python" and args[0] != "-m":  # python SCRIPT ARGS
            sys.argv = list(args)
            sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
            runpy.run_path(args[0], run_name="__main__")
        elif tool == "python":
            module = args[1]
            if module == "longformer_fs.launch" and args[2:3] == ["fairseq-train"]:
                importlib.reload(importlib.import_module("fairseq_cli.train"))  # its logging set-up
            sys.argv = ["-m", *args[2:]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        elif tool == "longformer-fs":
            from longformer_fs.cli import main

            sys.argv = [tool, *args]
            return main(args) or 0
        else:
            name, function = TOOLS[tool].split(":")
            module = importlib.import_module(name)
            if name.startswith("fairseq_cli."):
                module = importlib.reload(module)  # runs its logging set-up again
            sys.argv = [tool, *args]
            getattr(module, function)()
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


def _child(request: dict, fds: list[int]) -> None:
    """The forked command, from its set-up to its exit: it never returns to the server's loop."""
    status = 1
    try:
        status = _command(request, fds)
    except BaseException:  # in the set-up or the end, not the command (_run reports its own)
        import traceback

        traceback.print_exc()
    finally:
        os._exit(status)


def _command(request: dict, fds: list[int]) -> int:
    import atexit
    import signal

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # A new interpreter's dispositions: SIGPIPE ignored (a write to a closed pipe raises
    # BrokenPipeError), SIGINT as KeyboardInterrupt, the others the system's default.
    for number in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.chdir(request["cwd"])
    sys.executable = request["executable"]
    os.environ.clear()
    os.environ.update(request["env"])
    _threads_as_started()
    _generators_as_started()
    for stream in (sys.stdout, sys.stderr):  # buffered as a new interpreter's would be on these files
        if os.environ.get("PYTHONUNBUFFERED"):
            stream.reconfigure(write_through=True)
        elif os.isatty(stream.fileno()):
            stream.reconfigure(line_buffering=True)
    for entry in reversed([p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, entry)
        if request["tool"] != FRESH:  # the fresh server's children import the plugin themselves
            _alias_package(Path(entry))
    status = _run(request)
    status = _join_threads(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # CPython: a failed flush at exit makes a successful run's status 120
            status = status or 120
    return status


# How long a command's non-daemon threads may take to end after it returns. A new
# interpreter would wait for them however long they take: one still running after this
# would have hung the user's command at its end.
THREAD_GRACE_S = 5.0


def _join_threads(status: int) -> int:
    """A new interpreter's end: ``threading._shutdown``, which runs the threading module's
    exit callbacks (an idle ``ThreadPoolExecutor``'s workers leave on them) and then joins
    every non-daemon thread. One still running after :data:`THREAD_GRACE_S` fails the
    command, named on stderr, where a new interpreter would hang."""
    import threading

    ended = threading.Event()

    def watchdog() -> None:
        if ended.wait(THREAD_GRACE_S):
            return
        running = [t.name for t in threading.enumerate()
                   if t is not threading.main_thread() and not t.daemon and t.is_alive()]  # fmt: skip
        print(f"zygote: the command returned with a non-daemon thread still running ({', '.join(running)}): "
              "a new interpreter would wait for it at exit", file=sys.stderr, flush=True)  # fmt: skip
        try:
            sys.stdout.flush()  # what the command printed, for the test that reads it
        except OSError:
            pass
        os._exit(status or 1)

    threading.Thread(target=watchdog, name="zygote watchdog", daemon=True).start()
    threading._shutdown()
    ended.set()
    return status


def _generators_as_started() -> None:
    """The global random generators as a new interpreter's, seeded from the OS: numpy's and
    torch's CPU generator (a fork copies the server's state to every child, so every
    command would draw the same numbers; Python's ``random`` reseeds itself at fork)."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _threads_as_started() -> None:
    """The intra-op threads a new interpreter's torch would take from the caller's
    ``OMP_NUM_THREADS``: torch read the server's own environment when the server imported
    it (the xdist controller's, which sets none), and its children would otherwise run with
    one thread a core beside each other (the suite 1,027 s against about 800 s)."""
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _alias_package(entry: Path) -> None:
    """A journey's checkout links this one's files: its ``longformer_fs`` is the same
    package, which fairseq's ``--user-dir`` then finds already imported."""
    import longformer_fs

    alias = entry / "longformer_fs"
    if alias.is_dir() and alias.resolve() == Path(longformer_fs.__path__[0]).resolve():
        longformer_fs.__path__.append(str(alias))


def serve(address: str, fresh: bool = False) -> None:
    """Import what the commands need (``fresh``: :data:`FRESH_PRELOAD` only), then fork a
    child per request until stdin closes."""
    try:
        if fresh:
            _preload_fresh()
        else:
            _preload_commands()
        quiet_collector()
        _serve(address)
    finally:
        Path(address + STARTING).unlink(missing_ok=True)


def quiet_collector() -> None:
    """What is imported now lives as long as the process: frozen, out of the cyclic garbage
    collector's reach, so that its full collections (0.5-0.7 s each over torch's, fairseq's
    and transformers' objects, about one per command) walk only what came after; and
    collections made rarer, since the tests and commands allocate in bursts. Called by the
    servers before they fork and by the test workers after collection. A command's meaning
    is unchanged: only when unreachable cycles are freed. (The suite, CI's way on 2 cores:
    808 s against 941 s; a command's collections 1.6 s instead of 4.4 s over 9 commands.)"""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


def _preload_commands() -> None:
    os.environ.pop(ENV, None)
    import fairseq  # noqa: F401
    import torch
    import torch._dynamo  # noqa: F401  (torch.optim's first optimizer imports it: 1.9 s a training)
    import transformers  # noqa: F401

    import longformer_fs.cli  # noqa: F401
    import longformer_fs.components  # noqa: F401
    import longformer_fs.launch  # noqa: F401

    for entry in TOOLS.values():
        __import__(entry.split(":")[0])
    assert not torch.cuda.is_initialized()


def _preload_fresh() -> None:
    import importlib

    os.environ.pop(FRESH_ENV, None)
    for name in FRESH_PRELOAD:
        importlib.import_module(name)
    owned = [m for m in sys.modules if m.split(".")[0] in ("fairseq", "fairseq_cli", "longformer_fs", "transformers")]
    assert not owned, f"the fresh server imported {owned[:5]}"


def _serve(address: str) -> None:
    import selectors
    import signal

    sys.path[:] = [p for p in sys.path if p != str(TESTS)]  # a command's own interpreter would not see tests/

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".new")
    listener.listen(64)
    os.replace(address + ".new", address)  # connectable from the moment it exists
    Path(address + STARTING).unlink(missing_ok=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # the test worker's end: closed, we stop
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=0.02):
            if key.fileobj is sys.stdin:
                for pid in waiting:
                    os.kill(pid, signal.SIGKILL)
                return
            if key.fileobj is not listener:
                # A shim never writes after its request: its end readable means the shim is
                # gone (killed, SIGKILL included), and its command goes with it, as a
                # command started by a shell is the process the signal ended.
                selector.unregister(key.fileobj)
                os.kill(key.data, signal.SIGKILL)
                continue
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                _child(request, fds)
            for fd in fds:
                os.close(fd)
            try:
                connection.sendall(f"{pid}\n".encode())
            except OSError:  # the shim is already gone
                pass
            waiting[pid] = connection
            selector.register(connection, selectors.EVENT_READ, pid)
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            connection = waiting.pop(pid, None)
            if connection is not None:
                try:
                    selector.unregister(connection)
                except KeyError:  # unregistered when its shim went
                    pass
                try:
                    connection.sendall(f"{code}\n".encode())
                except OSError:
                    pass
                finally:
                    connection.close()


if __name__ == "__main__":
    if sys.argv[2:] not in ([], ["--fresh"]):
        sys.exit(f"usage: zygote.py SOCKET [--fresh], not {sys.argv[1:]}")
    serve(sys.argv[1], fresh=sys.argv[2:] == ["--fresh"])
