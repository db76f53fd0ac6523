"""How much of a large call's time is a second result kept alive?

A loop such as ``out = comm.allgather(x)`` holds the last result while the
next call makes a new one, so each rank's results alternate between two
buffers. The MPI side of ``simdist bench`` (mpi4py's buffer API) receives
into one buffer, reused, and the bench's simulator loop drops each result
before the next call, so that a rank's results reuse one buffer too. This
runs ``World(N)`` allgathers or allreduces of float32 whose results are of
the given size, 30 timed calls per rank, alternately in a loop that holds
the last result ("keep") and one that drops it ("drop", the bench's). It
prints the mean time per call of each loop (the mean over ranks; median of
the rounds) as JSON and as a line.

Usage: ``python docs/measurements/result_buffers.py [allgather|allreduce] [N] [MiB] [rounds]``
(default ``allgather 8 16 2``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import simdist

CALLS = 30


def _loop(comm, collective: str, nbytes: int, drop: bool) -> float:
    parts = comm.size if collective == "allgather" else 1
    x = np.full(nbytes // 4 // parts, comm.rank, np.float32)
    call = getattr(comm, collective)
    out = call(x)
    comm.barrier()
    start = time.perf_counter()
    for _ in range(CALLS):
        if drop:
            out = None
        out = call(x)
    elapsed = time.perf_counter() - start
    assert out.size * 4 == nbytes // parts * parts
    return elapsed / CALLS * 1e6


def main() -> None:
    collective = sys.argv[1] if len(sys.argv) > 1 else "allgather"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    mib = float(sys.argv[3]) if len(sys.argv) > 3 else 16
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    nbytes = int(mib * (1 << 20))
    times: dict[str, list[float]] = {"keep": [], "drop": []}
    with simdist.World(n) as world:
        for _ in range(rounds):
            for loop in times:
                times[loop].append(statistics.mean(world.run(_loop, collective, nbytes, loop == "drop")))
    report = {"collective": collective, "n": n, "bytes": nbytes, "calls": CALLS, "rounds": rounds,
              "time_us": {k: round(statistics.median(v), 1) for k, v in times.items()},
              "time_us_rounds": {k: [round(t, 1) for t in v] for k, v in times.items()}}
    print(json.dumps(report))
    print(f"{collective} of {mib} MiB at N = {n}: " + ", ".join(f"{k} {v} us" for k, v in report["time_us"].items()))


if __name__ == "__main__":
    main()
