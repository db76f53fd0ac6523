"""The floor of a two-process handshake in Python on this machine.

Two processes, each pinned to its own CPU, share one page. In round i each
stores i in its own word and spins until the other's word reaches i: the
least any two-rank collective written in Python must do (the simulator's
barrier adds its signature check and the bookkeeping for reports). Prints
the percentiles and the mean of the round time, in microseconds, as JSON
and as a line, for each process.
Usage: ``python docs/measurements/pingpong.py [rounds]`` (Linux, 2 CPUs or more).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time

import numpy as np


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    page = mmap.mmap(-1, 4096)
    words = memoryview(page).cast("q")
    pid = os.fork()
    me = 0 if pid else 1
    os.sched_setaffinity(0, {me})
    mine, theirs = me * 8, (1 - me) * 8  # a cache line apart
    clock = time.perf_counter
    times = np.zeros(rounds)
    for i in range(1, rounds + 1):
        start = clock()
        words[mine] = i
        while words[theirs] < i:
            pass
        times[i - 1] = clock() - start
    times *= 1e6
    cuts = dict(zip(("p10", "p50", "p90", "p99"), np.percentile(times, [10, 50, 90, 99]).round(2).tolist()))
    figures = {"process": me, "rounds": rounds, **cuts, "mean": round(float(times.mean()), 2)}
    if pid:
        os.waitpid(pid, 0)  # the other process prints first
    print(json.dumps(figures))
    print(f"process {me}: median {cuts['p50']} us, p90 {cuts['p90']} us, mean {figures['mean']} us per round")
    if not pid:
        os._exit(0)


if __name__ == "__main__":
    main()
