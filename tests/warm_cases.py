"""What a command may do that its process's start and end decide, as a script the suite
runs both warm (through tests/zygote.py's shims: ``python`` of a script in tests/ is sent
to the zygote) and in a new interpreter, to compare the two (test_warm_starts.py).

    python warm_cases.py thread            leave a non-daemon thread running, and return
    python warm_cases.py short-thread      leave one that ends in 0.3 s, and return
    python warm_cases.py executor          leave an idle ThreadPoolExecutor (its workers end at exit)
    python warm_cases.py random            print numpy's and torch's first draws
    python warm_cases.py random-numpy      print numpy's (no torch to import: a quick new interpreter)
    python warm_cases.py pipe              print 200,000 lines (for ``| head -1``)
    python warm_cases.py sleep PIDFILE     write this process's pid, then sleep 120 s
"""

import os
import sys
import threading
import time


def main(case: str, *args: str) -> None:
    if case in ("thread", "short-thread"):
        seconds = 120 if case == "thread" else 0.3
        threading.Thread(target=time.sleep, args=(seconds,), name=f"sleeps {seconds} s").start()
        print("returned", flush=True)
    elif case == "executor":
        from concurrent.futures import ThreadPoolExecutor

        print(ThreadPoolExecutor(2).submit(sum, [1, 2]).result(), flush=True)
    elif case == "random-numpy":
        import numpy

        print(f"{numpy.random.random():.17f}")
    elif case == "random":
        import numpy
        import torch

        print(f"{numpy.random.random():.17f} {torch.rand(1).item():.17f}")
    elif case == "pipe":
        for i in range(200_000):
            print(i)
    elif case == "sleep":
        with open(args[0] + ".new", "w") as file:
            file.write(str(os.getpid()))
        os.replace(args[0] + ".new", args[0])
        time.sleep(120)
    else:
        sys.exit(f"unknown case {case!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
