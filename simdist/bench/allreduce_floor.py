"""Where does a large allreduce at N = 2 spend its time, phase by phase?

In the simulator's parallel fold (``SimComm._fold_in_parallel``) each rank,
per chunk, copies into its slot the half of its input that the other rank
folds ("copy in"), arrives, folds its own half over both ranks in place,
into the other rank's slot where that half lies, and into its result
("fold"), arrives again, and copies the half the other rank folded out of
its own slot ("copy out"). This runs
``World(2).run`` of float32 allreduces of the given size with the
communicator's steps wrapped in timers (the same code runs; the wrappers
add two clock reads per step) and prints, per rank, the mean per call of
each phase and of the waits, as JSON and as a line. Then it repeats the
copy in, fold and copy out on the same buffers in one process with no other
rank running, to show what the same work costs when no other CPU touches
the slot's cache lines.

With a third argument N the calls run in ``World(N)``, the waits are
named by the step they happen in, and the lone measurement (of two ranks'
work) is left out.

Usage: ``python docs/measurements/fold_phases.py [MiB] [calls] [N]``
(default ``1 200 2``).
"""

from __future__ import annotations

import json
import mmap
import sys
import time

import numpy as np

import simdist
from simdist.sim import _comm

CLOCK = time.perf_counter
#: The phase between two consecutive marks; a step's own time is a wait
#: (for the other rank), and the rest (signing, checks, slicing) is "other".
PHASES = {
    ("_release end", "_arrive"): "copy in",
    ("fold", "fold end"): "fold",
    ("_arrive end", "_done"): "copy out",
}
WAIT = {}  # with N = 2 every wait is "wait"; else "wait _arrive" and so on


def _timed_calls(comm, nbytes: int, calls: int) -> dict:
    """Per call: the whole allreduce and the time between the steps."""
    marks: list[tuple[str, float]] = []
    for name in ("_arrive", "_release", "_done"):
        step = getattr(comm, name)

        def wrapped(*args, _step=step, _name=name):
            marks.append((_name, CLOCK()))
            _step(*args)
            marks.append((_name + " end", CLOCK()))

        setattr(comm, name, wrapped)
    fold = _comm.fold_in_blocks

    def timed_fold(*args, **kwargs):
        marks.append(("fold", CLOCK()))
        out = fold(*args, **kwargs)
        marks.append(("fold end", CLOCK()))
        return out

    _comm.fold_in_blocks = timed_fold
    try:
        return _phases(comm, nbytes, calls, marks)
    finally:
        _comm.fold_in_blocks = fold


def _phases(comm, nbytes: int, calls: int, marks: list) -> dict:
    x = np.arange(nbytes // 4, dtype=np.float32) + comm.rank
    for _ in range(5):
        comm.allreduce(x)
    comm.barrier()
    totals: dict[str, float] = {}
    start = CLOCK()
    for _ in range(calls):
        marks.clear()
        marks.append(("call", CLOCK()))
        comm.allreduce(x)
        marks.append(("call end", CLOCK()))
        for (a, ta), (b, tb) in zip(marks, marks[1:]):
            gap = PHASES.get((a, b)) or ((WAIT.get(a, "wait " + a)) if b == a + " end" else "other")
            totals[gap] = totals.get(gap, 0.0) + (tb - ta)
    elapsed = CLOCK() - start
    out = {k: round(v / calls * 1e6, 1) for k, v in sorted(totals.items())}
    out["call"] = round(elapsed / calls * 1e6, 1)
    return out


def _alone(nbytes: int, calls: int) -> dict:
    """The same copy in, fold and copy out, in one process, no peer: the
    two slots are page-aligned mappings, as the arena's are, and the result
    is reused (a rank keeps freed memory for its next result). Then two
    copies of the whole message (``numpy.copyto``, as ``simdist bench``
    measures the copy bandwidth), the least that the busbw target allows."""
    n = nbytes // 4
    half = n // 2
    x = np.arange(n, dtype=np.float32)
    mine, theirs = (np.frombuffer(mmap.mmap(-1, nbytes), np.float32) for _ in range(2))
    theirs[:] = 1
    out = np.zeros(n, np.float32)  # one result, so that no page is faulted in while timed
    times = {"copy in": 0.0, "fold": 0.0, "copy out": 0.0, "two copies": 0.0}
    for i in range(calls + 5):
        t0 = CLOCK()
        mine[half:] = x[half:]
        t1 = CLOCK()
        _comm.fold_in_blocks("sum", [x[:half], theirs[:half]], theirs[:half], 2, also=out[:half])
        t2 = CLOCK()
        out[half:] = mine[half:]
        t3 = CLOCK()
        np.copyto(out, x)
        np.copyto(out, x)
        t4 = CLOCK()
        if i >= 5:
            for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                times[k] += dt
    return {k: round(v / calls * 1e6, 1) for k, v in times.items()}


def main() -> None:
    mib = float(sys.argv[1]) if len(sys.argv) > 1 else 1
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    nbytes = int(mib * (1 << 20)) // 64 * 64
    if size == 2:
        WAIT.update({step: "wait" for step in ("_arrive", "_release", "_done")})
    with simdist.World(size) as world:
        ranks = world.run(_timed_calls, nbytes, calls)
    alone = _alone(nbytes, calls) if size == 2 else None
    report = {"bytes": nbytes, "calls": calls, "n": size, "ranks": ranks, "alone": alone}
    print(json.dumps(report))
    for rank, phases in enumerate(ranks):
        print(f"rank {rank}: " + ", ".join(f"{k} {v} us" for k, v in phases.items()))
    if alone is not None:
        print("alone:  " + ", ".join(f"{k} {v} us" for k, v in alone.items()))


if __name__ == "__main__":
    main()
