"""What runs beside a simulated rank: its threads, its BLAS, its first calls.

For a fresh ``World(2)`` (each rank pinned to a CPU of its own on a machine
with 2 or more) and a ``World(4)`` (ranks sharing the CPUs on 2), prints:

- ``threads``: each rank's thread count (its main thread and the lifeline
  watcher; a third is an OpenBLAS pool thread);
- ``matmul_ms``: each rank's median time of a 64x1024 by 1024x1024 float32
  product;
- ``first_calls_us`` (World(2) only): the mean time of a barrier in each
  block of 1,000 of the world's first 15,000 barriers, on rank 0. An idle
  BLAS thread spinning on a rank's CPU shows as blocks several times slower
  than the last ones.

As JSON, then one line per world. Usage: ``python docs/measurements/rank_threads.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

import simdist


def _first_barriers(comm):
    blocks = []
    for _ in range(15):
        start = time.perf_counter()
        for _ in range(1000):
            comm.barrier()
        blocks.append(round((time.perf_counter() - start) / 1000 * 1e6, 1))
    return blocks


def _threads_and_matmul(comm):
    a, b = np.ones((64, 1024), np.float32), np.ones((1024, 1024), np.float32)
    times = []
    for _ in range(10):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return len(os.listdir("/proc/self/task")), round(statistics.median(times) * 1e3, 2)


def main() -> None:
    report = {}
    for n in (2, 4):
        with simdist.World(n) as world:
            first = world.run(_first_barriers)[0] if n == 2 else None
            per_rank = world.run(_threads_and_matmul)
        report[f"World({n})"] = {"threads": [t for t, _ in per_rank], "matmul_ms": [m for _, m in per_rank],
                                 "first_calls_us": first}
    print(json.dumps(report))
    for name, r in report.items():
        line = f"{name}: threads {r['threads']}, matmul ms {r['matmul_ms']}"
        if r["first_calls_us"]:
            line += f", barrier us per block of 1000 {r['first_calls_us']}"
        print(line)


if __name__ == "__main__":
    main()
