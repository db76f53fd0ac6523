"""How close is a large allreduce to the copies it cannot avoid?

``simdist bench --targets`` asks the busbw of a 64 MiB allreduce to be at
least half the copy bandwidth. At N = 2, busbw is S / time, so the target
asks for the whole call in the time of two copies of the message at the
bench's copy rate. Two copies is also the least the simulator's allreduce
can move per rank at N = 2: each rank writes its whole result, and the half
that the other rank folds must cross shared memory, written once and read
once.

For each size S this times, in one ``World(N)`` (default N = 2):

- ``call``: a float32 allreduce of S, the bench's loop (one result alive at
  a time, the result checked), mean per call over the ranks;
- ``two copies``: every rank at once doing two ``numpy.copyto`` of S into a
  reused array, the same CPUs busy as in the call;
- ``limit``: the time the busbw target allows, two copies at the copy
  bandwidth that ``simdist bench`` measures (in this process, alone).

It prints JSON lines and a table. Usage: ``python -m
simdist.bench.allreduce_floor [MiB,MiB,...] [calls] [N]`` (default
``16,64 20 2``).
"""

from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from .._world import World
from .cells import human_bytes, is_right, make_case, timed
from .measurements import copy_bandwidth
from .report import columns

__all__ = ["measure"]


def _rank(comm, nbytes: int, calls: int) -> tuple[float, float, int]:
    """(µs per allreduce, µs per two copies of the message, wrong results) on this rank."""
    case = make_case("allreduce", comm.size, comm.rank, nbytes // 4, "float32")
    call_us, wrong = timed(lambda: comm.allreduce(case.x), lambda got: is_right(got, case.want), 3, calls,
                           comm.barrier)
    out = np.empty_like(case.x)

    def two_copies():
        np.copyto(out, case.x)
        np.copyto(out, case.x)

    copies_us, _ = timed(two_copies, lambda _: True, 3, calls, comm.barrier)
    return call_us, copies_us, wrong


def measure(mib: list[float], calls: int = 20, n: int = 2) -> list[dict]:
    """One row per size: the call, two copies on every rank at once, and the busbw target's limit."""
    rows = []
    with World(n) as world:
        for size in mib:
            nbytes = int(size * (1 << 20)) // 64 * 64
            per_rank = world.run(_rank, nbytes, calls)
            copy = copy_bandwidth(nbytes)
            call, copies = (statistics.fmean(r[i] for r in per_rank) for i in (0, 1))
            limit = 2 * nbytes / copy["GBps"] / 1e3
            rows.append({"n": n, "bytes": nbytes, "call_us": round(call, 1), "two_copies_us": round(copies, 1),
                         "limit_us": round(limit, 1), "call_over_two_copies": round(call / copies, 2),
                         "call_over_limit": round(call / limit, 2), "wrong": sum(r[2] for r in per_rank)})
    return rows


def main(argv: list[str]) -> None:
    mib = [float(s) for s in argv[0].split(",")] if argv else [16, 64]
    calls = int(argv[1]) if len(argv) > 1 else 20
    n = int(argv[2]) if len(argv) > 2 else 2
    rows = measure(mib, calls, n)
    for row in rows:
        print(json.dumps(row))
    head = ("N", "size", "call us", "two copies us", "limit us", "call/two copies", "call/limit", "wrong")
    keys = ("n", "bytes", "call_us", "two_copies_us", "limit_us", "call_over_two_copies", "call_over_limit", "wrong")
    lines = [tuple(human_bytes(r[k]) if k == "bytes" else str(r[k]) for k in keys) for r in rows]
    print(columns(head, lines, left=(False,) * len(head)))


if __name__ == "__main__":
    main(sys.argv[1:])
