"""How long a simulated rank should yield the CPU before it sleeps, with
the CPUs idle and with other programs keeping them busy.

A waiting rank spins (when every rank has a CPU), yields, then sleeps on a
futex. This times a barrier and an 8-element float64 allreduce at each
world size, for each bound on the time spent yielding
(``simdist.sim._arena.YIELD_NS``; "none" is no bound but the yield count),
the bounds taking turns, first on the otherwise idle machine and then
beside ``--busy`` processes that only compute (one per CPU by default;
0: the idle machine only).
A figure is the median over ``rounds`` worlds of the slowest rank's mean
time per call.

Usage: ``python -m simdist.bench.waiting [N,N,...] [--bounds none,50000]
[--rounds 5] [--calls 300] [--busy K]`` (default N 2,3,4,8) prints a table
and the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import simdist
from simdist.sim import _arena

NO_BOUND = 10**12


def _rank(comm, calls: int) -> tuple[float, float]:
    x = np.ones(8)
    comm.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        comm.barrier()
    barrier = (time.perf_counter() - start) / calls
    start = time.perf_counter()
    for _ in range(calls):
        comm.allreduce(x)
    return barrier, (time.perf_counter() - start) / calls


def _measure(sizes, bounds, rounds: int, calls: int) -> dict:
    """{(n, bound): (barrier us, allreduce us)}: medians of the slowest rank's means."""
    found: dict = {}
    for n in sizes:
        runs: dict = {b: [] for b in bounds}
        for _ in range(rounds):
            for bound in bounds:
                _arena.YIELD_NS = NO_BOUND if bound == "none" else int(bound)  # the forked ranks inherit it
                with simdist.World(n, timeout=60) as world:
                    out = world.run(_rank, calls)
                runs[bound].append([max(o[k] for o in out) * 1e6 for k in (0, 1)])
        for bound in bounds:
            found[n, bound] = tuple(round(statistics.median(r[k] for r in runs[bound]), 1) for k in (0, 1))
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m simdist.bench.waiting", description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="?", default="2,3,4,8")
    p.add_argument("--bounds", default=f"none,{_arena.YIELD_NS}", help="ns, or 'none' (default: none and today's)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--busy", type=int, default=len(os.sched_getaffinity(0)), help="busy processes (default one per CPU)")
    args = p.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    bounds = args.bounds.split(",")
    rows = []
    for load in ("idle", f"{args.busy} busy")[:2 if args.busy else 1]:
        hogs = [] if load == "idle" else [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                                          for _ in range(args.busy)]
        try:
            found = _measure(sizes, bounds, args.rounds, args.calls)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        rows += [{"load": load, "ranks": n, "yield_bound_ns": b, "barrier_us": v[0], "allreduce_us": v[1]}
                 for (n, b), v in found.items()]
    for r in rows:
        print(f"{r['load']:>8} N={r['ranks']:<3} yield bound {r['yield_bound_ns']:>7}: barrier {r['barrier_us']:8.1f} us, "
              f"allreduce(8) {r['allreduce_us']:8.1f} us")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
