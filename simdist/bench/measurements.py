"""The measurements of ``simdist bench --targets`` that are not sweeps.

- copy bandwidth: ``numpy.copyto`` of a float32 array as large as the
  sweep's largest size into another (after one untimed copy that maps the
  pages), bytes copied / seconds, the median of a few;
- ``world.run`` rate: calls per second on ``World(4)``, each an allreduce of
  2 float32;
- start-up: ``World(8)`` and one trivial run, against ``mpiexec -n 8 python
  -c "from mpi4py import MPI"``;
- a big world: ``World(256)`` starts, runs a trivial function and one
  checked 1 MiB allreduce, and closes; wall times, and the memory of every
  process (PSS) and of the arena.

:func:`measure` takes every one ``opts`` asks for; each is also a function
of its own.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import numpy as np

from .._world import World
from .cells import human_bytes, layout
from .mpi_side import mpiexec_command, run_mpiexec
from .sweep import sim_body

__all__ = ["copy_bandwidth", "run_rate", "world_startup", "mpiexec_startup", "big_world", "measure"]

COPY_REPEATS = 5
RUN_N = 4
STARTUP_N = 8
BIG_BYTES = 1 << 20


def copy_bandwidth(nbytes: int, repeats: int = COPY_REPEATS) -> dict:
    """``numpy.copyto`` of a float32 array of ``nbytes`` into another (after one
    untimed copy that maps the pages): the median bandwidth, bytes copied / seconds."""
    src = np.ones(max(1, nbytes // 4), np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - t0)
    median = statistics.median(seconds)
    return {"bytes": src.nbytes, "repeats": repeats, "seconds": seconds, "median_s": median,
            "GBps": src.nbytes / median / 1e9}


def _tiny(comm) -> bool:
    return bool(comm.allreduce(np.ones(2, np.float32))[0] == comm.size)


def _noop(comm) -> int:
    return comm.rank


def run_rate(n: int, runs: int) -> dict:
    """``world.run`` calls per second on ``World(n)``, each doing an allreduce of
    2 float32 (after 20 untimed calls); ``wrong`` is 1 if any result was wrong."""
    with World(n) as world:
        for _ in range(min(runs, 20)):
            world.run(_tiny)
        ok, start = True, time.perf_counter()
        for _ in range(runs):
            ok &= all(world.run(_tiny))
        seconds = time.perf_counter() - start
    return {"n": n, "runs": runs, "seconds": seconds, "per_second": runs / seconds, "wrong": int(not ok)}


def world_startup(n: int, repeats: int) -> dict:
    """Median wall time of ``World(n)`` + one trivial run, and of closing it."""
    starts, closes = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        world = World(n)
        try:
            world.run(_noop)
            t1 = time.perf_counter()
        finally:
            world.close()
        starts.append(t1 - t0)
        closes.append(time.perf_counter() - t1)
    return {"n": n, "sim_s": statistics.median(starts), "sim_all_s": starts, "sim_close_s": statistics.median(closes),
            "mpi_s": None, "mpi_all_s": [], "mpi_command": None}


def mpiexec_startup(n: int, repeats: int, opts: dict) -> dict:
    """Median wall time of ``mpiexec -n n python -c "from mpi4py import MPI"``."""
    cmd = mpiexec_command(n, opts) + [sys.executable, "-c", "from mpi4py import MPI"]
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_mpiexec(cmd, check=True, capture_output=True, timeout=opts["mpi_timeout"])
        seconds.append(time.perf_counter() - t0)
    return {"mpi_s": statistics.median(seconds), "mpi_all_s": seconds, "mpi_command": " ".join(cmd)}


def pss_bytes(pid: int) -> int:
    """Proportional set size of process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return sum(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))


def arena_bytes() -> int:
    """Size of the simdist shared-memory mappings of this process (from /proc/self/maps)."""
    with open("/proc/self/maps") as fh:
        spans = [line.split()[0].split("-") for line in fh if "memfd:simdist-" in line]
    return sum(int(hi, 16) - int(lo, 16) for lo, hi in spans)


def _big_allreduce(comm, nbytes: int):
    count, _ = layout("allreduce", comm.size, nbytes, 4)
    return sim_body(comm, "allreduce", count, "float32", 0, 1)


def big_world(n: int, nbytes: int = BIG_BYTES) -> dict:
    """Start ``World(n)``, run a trivial function, run one checked allreduce of
    ``nbytes`` (memory is sampled right after it), close; wall times and memory:
    the PSS of the driver and every worker, and the driver's arena mapping."""
    t0 = time.perf_counter()
    world = World(n, timeout=300)
    try:
        t1 = time.perf_counter()
        world.run(_noop)
        t2 = time.perf_counter()
        per_rank = world.run(_big_allreduce, nbytes)
        t3 = time.perf_counter()
        pids = [os.getpid(), *world.pids]
        pss, arena = sum(pss_bytes(p) for p in pids), arena_bytes()
    finally:
        t4 = time.perf_counter()
        world.close()
    return {"n": n, "bytes": nbytes, "start_s": t1 - t0, "noop_run_s": t2 - t1, "allreduce_run_s": t3 - t2,
            "allreduce_in_rank_max_s": max(t for t, _ in per_rank) / 1e6, "close_s": time.perf_counter() - t4,
            "pss_bytes": pss, "processes": len(pids), "arena_bytes": arena, "wrong": sum(w for _, w in per_rank)}


def measure(opts: dict, say) -> dict:
    """Every measurement ``opts`` asks for besides the sweep: ``{"copy_bandwidth",
    "run_rate", "startup", "big_world", "errors"}``, None for one turned off
    (``opts["runs"]``, ``opts["startup_repeats"]``, ``opts["big_n"]`` 0)."""
    out = {"run_rate": None, "startup": None, "big_world": None, "errors": []}
    say(f"targets: copy bandwidth, numpy.copyto of {human_bytes(opts['copy_bytes'])}")
    out["copy_bandwidth"] = copy_bandwidth(opts["copy_bytes"])
    if opts["runs"]:
        say(f"targets: world.run rate, N={RUN_N}, {opts['runs']} runs")
        out["run_rate"] = run_rate(RUN_N, opts["runs"])
    if opts["startup_repeats"]:
        with_mpi = "mpi" in opts["backends"]
        say(f"targets: start-up, World({STARTUP_N}){f' and mpiexec -n {STARTUP_N}' if with_mpi else ''}, "
            f"median of {opts['startup_repeats']}")
        out["startup"] = world_startup(STARTUP_N, opts["startup_repeats"])
        try:
            if with_mpi:
                out["startup"].update(mpiexec_startup(STARTUP_N, opts["startup_repeats"], opts))
        except (OSError, subprocess.SubprocessError) as exc:
            out["errors"].append(f"MPI start-up N={STARTUP_N}: {exc}")
    if opts["big_n"]:
        say(f"targets: big world, N={opts['big_n']}, {human_bytes(BIG_BYTES)} allreduce")
        out["big_world"] = big_world(opts["big_n"])
    return out
