"""How long should a simulated rank spin before it yields, when ranks share CPUs?

For each N, one ``simdist.World(N)`` runs loops of ``barrier`` and of an
8-byte ``allreduce`` with the arena's ``spin_iters`` (the looks at a word
before the first ``os.sched_yield``) set to each value to compare, the
values alternated, ``repeats`` times. Prints the median and the range of
the mean time per call over the ranks, in microseconds, as JSON lines.

Usage: ``python docs/measurements/wait_spins.py [N,N,...] [spins,...] [repeats]``
(default ``4,8,16 50,5,1 3``; meant for more ranks than CPUs).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import simdist


def loop(comm, call: str, iters: int, spins: int) -> float:
    comm._arena.spin_iters = spins
    x = np.ones(2, np.float32)
    step = comm.barrier if call == "barrier" else (lambda: comm.allreduce(x))
    for _ in range(300):
        step()
    comm.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - start) / iters * 1e6


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [4, 8, 16]
    spins = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [50, 5, 1]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    for n in sizes:
        times: dict[tuple[str, int], list[float]] = {}
        with simdist.World(n) as world:
            for _ in range(repeats):
                for spin in spins:
                    for call in ("barrier", "allreduce"):
                        per_rank = world.run(loop, call, 3000, spin)
                        times.setdefault((call, spin), []).append(sum(per_rank) / n)
        for (call, spin), values in times.items():
            print(json.dumps({"n": n, "call": call, "spin_iters": spin,
                              "median_us": round(statistics.median(values), 1),
                              "min_us": round(min(values), 1), "max_us": round(max(values), 1)}), flush=True)


if __name__ == "__main__":
    main()
