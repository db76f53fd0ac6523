"""The least a barrier and a broadcast written in Python cost here, next to Open MPI's.

N processes share one page, each with its own word on its own cache line.

- **barrier**: in round i every process stores i in its word, then waits
  until every other word reaches i. This is the simulator's scheme (each
  member publishes an epoch and reads every other member's), with nothing
  else: no signature check, no words for hang reports, no sleeping.
- **broadcast**: in round i the root stores i (its 8-byte payload) in its
  word; every other process waits for it, then stores i in its own word to
  say it has read it. The root waits only before round i + 1, until every
  other process has read round i: a one-deep pipeline, so the root runs
  ahead as Open MPI's eager messages let its root run ahead. No result array
  is made.

Waiting spins on the words; when the processes outnumber the CPUs it yields
the CPU (``os.sched_yield``) after each look, as the simulator does. With
enough CPUs each process is pinned to its own, as mpiexec binds ranks.

The same rounds of ``MPI_Barrier`` and of an 8-byte ``MPI_Bcast`` (mpi4py's
``Barrier`` and ``Bcast``) run under ``mpiexec`` in the same run. Prints,
for each N, the mean time per round over the processes (microseconds), as
JSON lines and as a table with the ratio Python / Open MPI.

Usage: ``python -m simdist.bench.python_floor [N,N,...] [rounds]``
(default ``2,4,8,16 20000``; Linux, mpi4py and an ``mpiexec``, found as
``simdist run --backend mpi`` finds it).
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time

from .mpi_side import mpiexec_command, run_mpiexec
from .report import columns

LINE_WORDS = 8  # one word per 64-byte cache line

MPI_PROGRAM = """
import json, sys, time
import numpy as np
from mpi4py import MPI
comm, rounds = MPI.COMM_WORLD, int(sys.argv[1])
buf = np.zeros(1, np.float64)
out = {}
for name, call in (("barrier", comm.Barrier), ("broadcast", lambda: comm.Bcast(buf, root=0))):
    for _ in range(rounds // 10):
        call()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(rounds):
        call()
    mine = (time.perf_counter() - start) / rounds * 1e6
    out[name] = sum(comm.allgather(mine)) / comm.size
if comm.rank == 0:
    print(json.dumps(out))
"""


def _rank(me: int, n: int, rounds: int, words, results, oversubscribed: bool) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if not oversubscribed:
        os.sched_setaffinity(0, {cpus[me]})
    mine = me * LINE_WORDS
    others = [r * LINE_WORDS for r in range(n) if r != me]
    yield_cpu = os.sched_yield if oversubscribed else (lambda: None)
    clock = time.perf_counter

    def barrier(i):
        words[mine] = i
        for w in others:
            while words[w] < i:
                yield_cpu()

    def broadcast(i):
        if me == 0:
            for w in others:  # every reader is done with round i - 1
                while words[w] < i - 1:
                    yield_cpu()
            words[mine] = i
        else:
            while words[0] < i:
                yield_cpu()
            words[mine] = i

    base = n * LINE_WORDS
    for slot, (name, step) in enumerate((("barrier", barrier), ("broadcast", broadcast))):
        offset = 2 * slot * rounds  # rounds only grow: every test sees fresh numbers
        for i in range(offset + 1, offset + rounds // 10 + 1):
            step(i)
        barrier(offset + rounds // 10 + 1)
        start = clock()
        for i in range(offset + rounds // 10 + 2, offset + rounds // 10 + 2 + rounds):
            step(i)
        results[base + slot * n + me] = int((clock() - start) / rounds * 1e9)  # ns per round
        barrier(2 * (slot + 1) * rounds)  # let the root's last round be read before the next test


def python_floor(n: int, rounds: int) -> dict[str, float]:
    page = mmap.mmap(-1, 4096 * 4)
    words = memoryview(page).cast("q")
    oversubscribed = n > len(os.sched_getaffinity(0))
    pids = []
    for me in range(n):  # children only: this process keeps its CPUs for mpiexec
        pid = os.fork()
        if pid == 0:
            try:
                _rank(me, n, rounds, words, words, oversubscribed)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    base = n * LINE_WORDS
    return {name: sum(words[base + slot * n + r] for r in range(n)) / n / 1000
            for slot, name in enumerate(("barrier", "broadcast"))}


def open_mpi(n: int, rounds: int) -> dict[str, float]:
    """The same rounds of mpi4py's ``Barrier`` and 8-byte ``Bcast`` under ``mpiexec -n n``."""
    from ..mpi._driver import find_mpiexec

    cmd = mpiexec_command(n, {"mpiexec": find_mpiexec(), "mpi_args": []})
    done = run_mpiexec(cmd + [sys.executable, "-c", MPI_PROGRAM, str(rounds)], capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"mpiexec -n {n} failed with exit status {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    sizes = [int(s) for s in argv[0].split(",")] if argv else [2, 4, 8, 16]
    rounds = int(argv[1]) if len(argv) > 1 else 20000
    lines = []
    for n in sizes:
        floor, mpi = python_floor(n, rounds), open_mpi(n, rounds)
        for name in ("barrier", "broadcast"):
            row = {"n": n, "call": name, "python_floor_us": round(floor[name], 2),
                   "open_mpi_us": round(mpi[name], 2), "ratio": round(floor[name] / mpi[name], 2)}
            lines.append(tuple(str(v) for v in row.values()))
            print(json.dumps(row), flush=True)
    print(columns(("N", "call", "Python floor us", "Open MPI us", "ratio"), lines, left=(False, True, False, False, False)))


if __name__ == "__main__":
    main(sys.argv[1:])
