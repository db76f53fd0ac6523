"""How fast does each CPU copy when both copy at once, on this machine?

The bound on a large allreduce in docs/performance.md counts the bytes each
rank reads and writes at the rate of ``numpy.copyto``. That rate is
measured on one CPU while the other idles; in an allreduce at N = 2 both
ranks copy at the same time and share the memory system. This runs
``numpy.copyto`` of two private arrays of the given size (default 16 MiB)
in one process pinned to CPU 0 alone, then in two processes pinned to
CPUs 0 and 1 that start together, alternately, and prints each one's
median rate (bytes copied per second) as JSON and as a line.

Usage: ``python docs/measurements/copy_pair.py [MiB] [rounds]`` (Linux,
2 CPUs or more).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

COPIES = 20  # copies timed per round


def _copy_rate(cpu: int, nbytes: int, start_at: float) -> float:
    os.sched_setaffinity(0, {cpu})
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # fault both in
    while time.time() < start_at:
        pass
    t = time.perf_counter()
    for _ in range(COPIES):
        np.copyto(dst, src)
    return nbytes * COPIES / (time.perf_counter() - t) / 1e9


def _run(cpus: list[int], nbytes: int) -> list[float]:
    """Copy rates (GB/s) of one process per CPU in ``cpus``, started together."""
    start_at = time.time() + 0.2
    pipes = []
    for cpu in cpus:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(w, json.dumps(_copy_rate(cpu, nbytes, start_at)).encode())
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
    rates = []
    for pid, r in pipes:
        with os.fdopen(r) as fh:
            rates.append(json.loads(fh.read()))
        os.waitpid(pid, 0)
    return rates


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        sys.exit("needs 2 CPUs")
    alone, together = [], []
    for _ in range(rounds):
        alone += _run(cpus[:1], mib << 20)
        together += _run(cpus, mib << 20)
    out = {"bytes": mib << 20, "rounds": rounds, "alone_GBps": statistics.median(alone),
           "together_GBps_each": statistics.median(together), "alone_runs": alone, "together_runs": together}
    print(json.dumps(out))
    print(f"copy of {mib} MiB: {out['alone_GBps']:.1f} GB/s on one CPU alone, "
          f"{out['together_GBps_each']:.1f} GB/s on each of two CPUs at once (medians of {rounds} rounds)")


if __name__ == "__main__":
    main()
