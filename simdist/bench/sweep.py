"""The sweep: every backend x N x collective x size, as nccl-tests and OSU time them.

:func:`sweep` takes the options the command line builds (``opts``: the plan
of each N, the backends, the dtype, the iteration counts, the mpiexec) and
returns a report ``{"machine", "results", "errors"}``: one row per cell
(:func:`simdist.bench.cells.record`), where each cell was measured as
:mod:`simdist.bench.cells` describes. The simulator's cells run in
``simdist.World(n)``; the MPI side's in one ``mpiexec`` job per N
(:mod:`simdist.bench.mpi_side`).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess

import numpy as np

from .._world import World
from .cells import LARGE, ROOT, cell_sizes, is_right, iterations, layout, make_case, record, timed
from .mpi_side import mpi_sweep

__all__ = ["machine", "sim_body", "sim_sweep", "sweep", "merge_repeats"]


def first_line(cmd: list[str]) -> str | None:
    """The first line ``cmd`` prints, or None when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "?")
    except OSError:
        return "?"


def machine(opts: dict) -> dict:
    """Where and with what the run happens: date, CPUs, versions, the mpiexec, the commit, the load."""
    try:
        import mpi4py
    except ImportError:
        mpi4py = None
    commit = first_line(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always", "--dirty"])
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": cpu_model(),
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "mpi4py": mpi4py and mpi4py.__version__, "mpiexec": first_line([opts["mpiexec"], "--version"]),
            "simdist_commit": commit, "loadavg_start": os.getloadavg()}


def _sim_call(comm, collective: str, x):
    if collective == "broadcast":
        return lambda: comm.broadcast(x, root=ROOT)
    if collective == "reduce":
        return lambda: comm.reduce(x, root=ROOT)
    if collective == "barrier":
        return comm.barrier
    return lambda: getattr(comm, collective)(x)


def sim_body(comm, collective: str, count: int, dtype: str, warmup: int, iters: int, case=make_case):
    """One rank's measurement on the simulator: (mean µs, wrong)."""
    c = case(collective, comm.size, comm.rank, count, dtype)
    return timed(_sim_call(comm, collective, c.x), lambda got: is_right(got, c.want), warmup, iters, comm.barrier)


def sim_sweep(n: int, opts: dict, say, case=make_case) -> list[dict]:
    """Every collective and size of ``opts`` on one simulated world of ``n`` ranks."""
    rows, itemsize = [], np.dtype(opts["dtype"]).itemsize
    with World(n, timeout=opts["timeout"]) as world:
        for collective in opts["collectives"]:
            say(f"sim N={n} {collective}")
            for nbytes in cell_sizes(collective, opts["sizes"], n, itemsize):
                count, _ = layout(collective, n, nbytes, itemsize)
                per_rank = world.run(sim_body, collective, count, opts["dtype"], *iterations(nbytes, opts), case)
                rows.append(record("sim", collective, n, nbytes, opts["dtype"], per_rank))
    return rows


def sweep(opts: dict, say=lambda msg: None, case=make_case) -> dict:
    """Every backend x N x collective x size of ``opts["plan"]`` (one step per N,
    with its own collectives and sizes); a report ``{"results", "machine", "errors"}``.

    With ``opts["repeats"]`` K > 1, the cells below 1 MiB (and barrier) are
    measured K times, the backends taking turns, and each keeps the median
    (:func:`merge_repeats`): on a shared machine one pass can land in a slow
    moment of either backend. With ``opts["repeat_every_size"]`` (as
    ``--targets`` sets it) the cells of every size are repeated.

    ``case`` makes each rank's input and expected result on the simulator
    (default :func:`~simdist.bench.cells.make_case`); a test passes a wrong
    one to see it counted. A failed MPI job is an entry of ``errors``.
    """
    report = {"machine": machine(opts), "results": [], "errors": []}
    rows = []
    for step in opts["plan"]:
        for rep in range(opts["repeats"]):
            every = rep == 0 or opts.get("repeat_every_size")
            small = step["sizes"] if every else [b for b in step["sizes"] if b < LARGE]
            collectives = [c for c in step["collectives"] if small or c == "barrier"]
            if not collectives:
                break
            n, mine = step["n"], {**opts, "collectives": collectives, "sizes": small}
            if rep:
                say(f"repeat {rep + 1} of {opts['repeats']}: {'every size' if every else 'cells below 1 MiB'}")
            if "sim" in opts["backends"]:
                rows += sim_sweep(n, mine, say, case)
            if "mpi" in opts["backends"]:
                try:
                    rows += mpi_sweep(n, mine, say)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    report["errors"].append(f"MPI N={n}: {exc}")
                    break
    report["results"] = merge_repeats(rows)
    report["machine"]["loadavg_end"] = os.getloadavg()
    return report


def merge_repeats(rows: list[dict]) -> list[dict]:
    """One row per cell (backend, collective, N, bytes), in first-seen order:
    the median of the repeats' ``time_us`` (bandwidths from it), the least
    and most of their ``time_min_us`` and ``time_max_us``, the sum of
    ``wrong``; ``repeats`` and every repeat's ``time_us`` (``time_us_runs``)."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["backend"], r["collective"], r["n"], r["bytes"]), []).append(r)
    out = []
    for group in cells.values():
        runs = [r["time_us"] for r in group]
        mid = statistics.median(runs)
        row = {**group[0], "time_us": mid, "time_min_us": min(r["time_min_us"] for r in group),
               "time_max_us": max(r["time_max_us"] for r in group), "wrong": sum(r["wrong"] for r in group),
               "repeats": len(group), "time_us_runs": runs}
        if row["algbw_GBps"] is not None:  # bandwidths are inverse to the time
            scale = group[0]["time_us"] / mid if mid > 0 else 1.0
            row["algbw_GBps"] *= scale
            row["busbw_GBps"] *= scale
        out.append(row)
    return out
