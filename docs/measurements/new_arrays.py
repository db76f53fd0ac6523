"""What does a new result array cost, and what does a simulated rank save?

A collective returns a new array on every call. glibc serves a large one
with a fresh ``mmap`` whose pages fault in (and are zeroed) on first write,
unless it is told to keep freed memory in its heap, as simulated ranks are
(``simdist.sim._worker.keep_freed_memory``).

For each size, this process times ``numpy.copyto`` of a float32 array
into an existing array and into a new one, then a ``World(1)`` rank does the
same; then ``World(2)`` and ``World(4)`` time an ``allreduce`` of that size.
Prints the median of each, with the bandwidth of the copies, as JSON lines.

Usage: ``python docs/measurements/new_arrays.py [MiB,MiB,...] [repeats]``
(default ``1,64 9``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import simdist


def copies(comm, nbytes: int, repeats: int) -> dict[str, float]:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    into_existing, into_new = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        into_existing.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh = np.empty_like(src)
        np.copyto(fresh, src)
        into_new.append(time.perf_counter() - start)
        del fresh
    return {"into_existing_ms": statistics.median(into_existing) * 1e3,
            "into_new_ms": statistics.median(into_new) * 1e3}


def allreduce_ms(comm, nbytes: int, repeats: int) -> float:
    x = np.ones(nbytes // 4, np.float32)
    comm.allreduce(x)
    times = []
    for _ in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        comm.allreduce(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 64]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    for mib in sizes:
        nbytes = mib << 20
        here = copies(None, nbytes, repeats)
        with simdist.World(1) as world:
            [rank] = world.run(copies, nbytes, repeats)
        for where, got in (("this process", here), ("a simulated rank", rank)):
            print(json.dumps({"MiB": mib, "where": where,
                              **{k: round(v, 3) for k, v in got.items()},
                              "into_existing_GBps": round(nbytes / got["into_existing_ms"] / 1e6, 2),
                              "into_new_GBps": round(nbytes / got["into_new_ms"] / 1e6, 2)}), flush=True)
        for n in (2, 4):
            with simdist.World(n) as world:
                per_rank = world.run(allreduce_ms, nbytes, repeats)
            print(json.dumps({"MiB": mib, "allreduce_n": n, "median_ms": round(max(per_rank), 3)}), flush=True)


if __name__ == "__main__":
    main()
