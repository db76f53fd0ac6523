"""What does a non-root's ``None`` cost a small broadcast?

The contract lets non-roots pass ``None`` to ``broadcast``; ``simdist
bench`` does so. A non-root that passes None does not know the root's
dtype and shape, so its call takes the general path (sign, arrive, compare
every member's signature with the root's, look up where the root's plan put
the array), and the root's one-phase call sees signatures that differ and
compares them member by member too. This times ``World(N)`` broadcasts of 2
float32 from rank 0 with None on the non-roots, then with an array of the
root's dtype and shape on every rank, and, for scale, an allreduce of the
same array and a barrier: 300 warm-up and 3,000 timed calls per rank, the
mean over ranks, as JSON and as a line, per round.

Usage: ``python -m simdist.bench.broadcast_none [N] [rounds]`` (default ``8 2``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from .._world import World

WARMUP, CALLS = 300, 3000


def _timed(comm, call: str, none: bool = False) -> float:
    x = np.ones(2, np.float32)
    arg = None if none and comm.rank != 0 else x
    calls = {"broadcast": lambda: comm.broadcast(arg, 0), "allreduce": lambda: comm.allreduce(x),
             "barrier": comm.barrier}
    f = calls[call]
    for _ in range(WARMUP):
        f()
    comm.barrier()
    start = time.perf_counter()
    for _ in range(CALLS):
        f()
    elapsed = time.perf_counter() - start
    comm.barrier()
    return elapsed / CALLS * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with World(n) as world:
        for _ in range(rounds):
            row = {"n": n,
                   "broadcast_none_us": statistics.mean(world.run(_timed, "broadcast", True)),
                   "broadcast_array_us": statistics.mean(world.run(_timed, "broadcast")),
                   "allreduce_us": statistics.mean(world.run(_timed, "allreduce")),
                   "barrier_us": statistics.mean(world.run(_timed, "barrier"))}
            row = {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
            print(json.dumps(row))
            print(f"N = {n}: broadcast with None {row['broadcast_none_us']} us, with an array "
                  f"{row['broadcast_array_us']} us; allreduce {row['allreduce_us']} us; barrier {row['barrier_us']} us")


if __name__ == "__main__":
    main()
