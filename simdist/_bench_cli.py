"""``simdist bench``: an nccl-tests-style sweep of the collectives, simulator and MPI side by side.

``add_parser(subparsers)`` adds the subcommand; ``run(args)`` runs it and
returns the exit status: 0 when every result was right, 1 when one was wrong
or the MPI side failed, 2 for bad arguments. :func:`sweep` returns data; the
table, the progress lines, the JSON and the plot are made here, at the edge.
With ``--targets`` the run also takes the measurements that are not sweeps
and judges the performance targets (:mod:`simdist._targets`).

How one cell (backend, collective, N, size) is measured, OSU-style: warm-up
calls, a barrier, a timed loop, a barrier (:func:`iterations` gives the
counts). Each rank reports its mean time per call; the cell keeps the mean
over ranks (``time_us``, the figure the bandwidths use, as nccl-tests
averages over ranks) and the minimum and maximum. The timed loop drops
each result before the next call, so a rank holds one result at a time,
as the MPI side holds its one receive buffer; the simulator's next result
then reuses that memory, as ``g = comm.allreduce(g)`` in a training loop
does.

Sizes follow nccl-tests (doc/PERFORMANCE.md): ``bytes`` is S, the size of the
operation, and ``algbw = S / time``, ``busbw = algbw * factor``:

================  ==========================================  ============
collective        S                                           factor
================  ==========================================  ============
allreduce         each rank's buffer                          2(n-1)/n
broadcast, reduce the root's buffer                           1
allgather         the gathered result (n x each rank's part)  (n-1)/n
reduce_scatter    each rank's input (n x each rank's result)  (n-1)/n
alltoall          each rank's send buffer (n blocks)          (n-1)/n
================  ==========================================  ============

A requested size is rounded down to a whole number of elements (of blocks
of elements, for the last three) and up to at least one; ``bytes`` is the
size actually moved, so 8 B of float32 allgather on 4 ranks is reported as
16 B. Barrier has no size (``bytes`` 0, no bandwidths).

Checking: every input is a small integer, so every correct result is exact
in any summation order and is compared for equality. Every warm-up result
and the last timed result are checked on every rank (the timed loop itself
is not slowed by checks); receive buffers are zeroed before the timed loop,
so the last result cannot be left over from the warm-up. ``wrong`` counts
the mismatches over all ranks.

The MPI side is this module in worker mode (``--mpi-worker SPEC``) under
``mpiexec``, with mpi4py's buffer calls (``Allreduce``, ``Bcast``,
``Allgather``, ``Reduce_scatter_block``, ``Alltoall``, ``Reduce``,
``Barrier``) on numpy arrays; rank 0 writes the figures to a file the parent
reads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, NamedTuple

import numpy as np

from .cli import _json as json_report
from . import World

__all__ = ["add_parser", "run"]

COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "reduce", "barrier")
DEFAULT_COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier")
DTYPES = ("float32", "float64", "int32", "int64")
_BLOCKED = ("allgather", "reduce_scatter", "alltoall")  # S is n blocks of each rank's part
ROOT = 0
LARGE = 1 << 20  # messages of at least this many bytes use the "large" iteration counts
TARGET_REPEATS = 3  # --repeats with --targets: the median of 3 passes of the cells below LARGE


# -- sizes and bandwidths (pure) -------------------------------------------------------
def parse_bytes(text: str) -> int:
    """``8``, ``1K``, ``64KiB``, ``64MiB``, ``1M``, ``2G``, ``512B`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size={text!r}: use a whole number of bytes with an optional K, M or G "
                         "(KiB, MiB, GiB), e.g. 8, 1K, 64KiB, 64MiB")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """``min_bytes``, doubled until it passes ``max_bytes`` (as nccl-tests' ``-f 2``)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"min_bytes={min_bytes}, max_bytes={max_bytes}: need 1 <= min_bytes <= max_bytes")
    out, b = [], min_bytes
    while b <= max_bytes:
        out.append(b)
        b *= 2
    return out


def human_bytes(nbytes: int) -> str:
    """``8 B``, ``1 KiB``, ``64 MiB``; a size that is no whole number of KiB stays in bytes."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def iterations(nbytes: int, opts: dict) -> tuple[int, int]:
    """(warm-up, timed) call counts for a message of ``nbytes``."""
    large = nbytes >= LARGE
    return opts["large_warmup" if large else "warmup"], opts["large_iters" if large else "iters"]


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw for ``collective`` on ``n`` ranks."""
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in _BLOCKED:
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"collective={collective!r} has no bus bandwidth (choose from {', '.join(COLLECTIVES[:-1])})")


def layout(collective: str, n: int, nbytes: int, itemsize: int) -> tuple[int, int]:
    """``(count, bytes)``: elements of each rank's part, and S actually moved."""
    if collective == "barrier":
        return 0, 0
    if collective in _BLOCKED:
        count = max(1, nbytes // (n * itemsize))
        return count, count * n * itemsize
    count = max(1, nbytes // itemsize)
    return count, count * itemsize


# -- the data: exact small integers -----------------------------------------------------
class Case(NamedTuple):
    """One rank's input for one collective and size, and the result it must get
    (``want`` None: this rank gets no result, as a non-root of reduce)."""
    x: np.ndarray | None
    want: np.ndarray | None


def make_case(collective: str, n: int, rank: int, count: int, dtype: str) -> Case:
    """The input of ``rank`` and its exact expected result (values stay below 2**24)."""
    dt = np.dtype(dtype)
    i = np.arange(count) % 7
    blocks = np.arange(n)[:, None]
    if collective in ("allreduce", "reduce"):
        want = (i * n + n * (n + 1) // 2).astype(dt)
        return Case((i + rank + 1).astype(dt), want if collective == "allreduce" or rank == ROOT else None)
    if collective == "broadcast":
        want = (i + ROOT + 1).astype(dt)
        return Case(want.copy() if rank == ROOT else None, want)
    if collective == "allgather":
        return Case((i + rank + 1).astype(dt), (i + blocks + 1).astype(dt))
    if collective == "reduce_scatter":  # block j of rank r: i + r + 1 + j
        return Case((i + rank + 1 + blocks).astype(dt), (n * i + n * (n + 1) // 2 + n * rank).astype(dt))
    if collective == "alltoall":  # block j of rank r: i + r*n + j + 1; rank r gets x_j[r]
        return Case((i + rank * n + blocks + 1).astype(dt), (i + blocks * n + rank + 1).astype(dt))
    if collective == "barrier":
        return Case(None, None)
    raise ValueError(f"collective={collective!r}: choose from {', '.join(COLLECTIVES)}")


def _right(got, want) -> bool:
    return got is None if want is None else got is not None and np.array_equal(got, want)


def timed(call: Callable, check: Callable, warmup: int, iters: int, barrier: Callable,
          reset: Callable = lambda: None) -> tuple[float, int]:
    """OSU-style loop: ``warmup`` checked calls, barrier, ``iters`` timed calls,
    barrier, the last result checked. Returns (mean µs per call, wrong results)."""
    wrong = 0
    for _ in range(warmup):
        reset()
        wrong += not check(call())
    reset()
    barrier()
    out, start = None, time.perf_counter()
    for _ in range(iters):
        out = None  # one result alive at a time, as the MPI side's one receive buffer
        out = call()
    elapsed = time.perf_counter() - start
    barrier()
    if iters:
        wrong += not check(out)
    return elapsed / max(iters, 1) * 1e6, wrong


# -- the simulator side -------------------------------------------------------------------
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
    return timed(_sim_call(comm, collective, c.x), lambda got: _right(got, c.want), warmup, iters, comm.barrier)


# -- the MPI side ---------------------------------------------------------------------------
def mpiexec_command(n: int, opts: dict) -> list[str]:
    """``mpiexec -n n`` as simdist's MPI backend starts it, and ``opts["mpi_args"]``."""
    from .mpi._driver import launch_command

    return launch_command(opts["mpiexec"], n) + opts["mpi_args"]


def run_mpiexec(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd)`` in the environment simdist's MPI backend gives
    its jobs, with a session directory of its own, removed afterwards."""
    import shutil

    from .mpi._driver import launch_environment, session_tmpdir

    tmpdir = session_tmpdir()
    try:
        return subprocess.run(cmd, env=launch_environment(cmd[0], tmpdir), **kwargs)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def mpi_body(comm, MPI, collective: str, count: int, dtype: str, warmup: int, iters: int) -> tuple[float, int]:
    """One rank's measurement with mpi4py's buffer API: (mean µs, wrong)."""
    n, rank = comm.Get_size(), comm.Get_rank()
    c = make_case(collective, n, rank, count, dtype)
    if collective == "barrier":
        return timed(comm.Barrier, lambda _: True, warmup, iters, comm.Barrier)
    if collective == "broadcast":
        buf = c.x if rank == ROOT else np.empty_like(c.want)
        reset = (lambda: None) if rank == ROOT else (lambda: buf.fill(0))
        return timed(lambda: (comm.Bcast(buf, root=ROOT), buf)[1], lambda got: _right(got, c.want),
                     warmup, iters, comm.Barrier, reset)
    out = np.empty_like(c.want) if c.want is not None else None
    calls = {
        "allreduce": lambda: comm.Allreduce(c.x, out, op=MPI.SUM),
        "reduce": lambda: comm.Reduce(c.x, out, op=MPI.SUM, root=ROOT),
        "allgather": lambda: comm.Allgather(c.x, out),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(c.x, out, op=MPI.SUM),
        "alltoall": lambda: comm.Alltoall(c.x, out),
    }
    call = calls[collective]
    return timed(lambda: (call(), out)[1], lambda got: _right(got, c.want), warmup, iters, comm.Barrier,
                 (lambda: None) if out is None else (lambda: out.fill(0)))


def mpi_worker(spec: dict) -> None:
    """Body of ``--mpi-worker``: every rank measures every cell; rank 0 writes them."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    itemsize = np.dtype(spec["dtype"]).itemsize
    mine = []
    for collective in spec["collectives"]:
        for nbytes in _cell_sizes(collective, spec["sizes"], comm.Get_size(), itemsize):
            count, _ = layout(collective, comm.Get_size(), nbytes, itemsize)
            warm, iters = iterations(nbytes, spec)
            mine.append(mpi_body(comm, MPI, collective, count, spec["dtype"], warm, iters))
    every = comm.gather(mine, root=0)
    if comm.Get_rank() == 0:
        with open(spec["out"], "w") as fh:
            json.dump({"per_rank": every, "library": MPI.Get_library_version().splitlines()[0]}, fh)


def _cell_sizes(collective: str, requested: list[int], n: int, itemsize: int) -> list[int]:
    """The requested sizes that give distinct S (8 B and 16 B are both 12 B of
    float32 allgather on 3 ranks: measured once); ``[0]`` for barrier."""
    if collective == "barrier":
        return [0]
    seen, out = set(), []
    for nbytes in requested:
        moved = layout(collective, n, nbytes, itemsize)[1]
        if moved not in seen:
            seen.add(moved)
            out.append(nbytes)
    return out


# -- the sweep -------------------------------------------------------------------------------
def _first_line(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def machine(opts: dict) -> dict:
    """Where and with what the run happens: date, CPUs, versions, the mpiexec, the commit, the load."""
    try:
        import mpi4py
    except ImportError:
        mpi4py = None
    with open("/proc/cpuinfo") as fh:
        model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "?")
    commit = _first_line(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always", "--dirty"])
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "mpi4py": mpi4py and mpi4py.__version__, "mpiexec": _first_line([opts["mpiexec"], "--version"]),
            "simdist_commit": commit, "loadavg_start": os.getloadavg()}


def record(backend: str, collective: str, n: int, nbytes: int, dtype: str, per_rank: list) -> dict:
    """One result row from every rank's (mean µs, wrong)."""
    times = [t for t, _ in per_rank]
    mean = statistics.fmean(times)
    _, moved = layout(collective, n, nbytes, np.dtype(dtype).itemsize)
    algbw = moved / mean / 1e3 if collective != "barrier" and mean > 0 else None  # bytes/µs = MB/s
    return {"backend": backend, "collective": collective, "n": n, "bytes": moved,
            "dtype": None if collective == "barrier" else dtype,
            "time_us": mean, "time_min_us": min(times), "time_max_us": max(times),
            "algbw_GBps": algbw, "busbw_GBps": None if algbw is None else algbw * bus_factor(collective, n),
            "wrong": sum(w for _, w in per_rank)}


def sim_sweep(n: int, opts: dict, say, case=make_case) -> list[dict]:
    """Every collective and size on one simulated world of ``n`` ranks."""
    rows, itemsize = [], np.dtype(opts["dtype"]).itemsize
    with World(n, timeout=opts["timeout"]) as world:
        for collective in opts["collectives"]:
            say(f"sim N={n} {collective}")
            for nbytes in _cell_sizes(collective, opts["sizes"], n, itemsize):
                count, _ = layout(collective, n, nbytes, itemsize)
                per_rank = world.run(sim_body, collective, count, opts["dtype"], *iterations(nbytes, opts), case)
                rows.append(record("sim", collective, n, nbytes, opts["dtype"], per_rank))
    return rows


def mpi_sweep(n: int, opts: dict, say) -> list[dict]:
    """This module's worker mode under ``mpiexec -n n``; its rows."""
    cmd = mpiexec_command(n, opts)
    say(f"mpi N={n} {','.join(opts['collectives'])}: {' '.join(cmd)}")
    with tempfile.TemporaryDirectory(prefix="simdist-bench-") as tmp:
        spec = {k: opts[k] for k in ("collectives", "sizes", "dtype", "warmup", "iters", "large_warmup", "large_iters")}
        spec["out"] = os.path.join(tmp, "out.json")
        cmd += [sys.executable, "-m", "simdist._bench_cli", "--mpi-worker", json.dumps(spec)]
        proc = run_mpiexec(cmd, capture_output=True, text=True, timeout=opts["mpi_timeout"])
        if proc.returncode != 0 or not os.path.exists(spec["out"]):
            raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(spec["out"]) as fh:
            every = json.load(fh)["per_rank"]
    itemsize = np.dtype(opts["dtype"]).itemsize
    cells = [(c, b) for c in opts["collectives"] for b in _cell_sizes(c, opts["sizes"], n, itemsize)]
    return [record("mpi", c, n, b, opts["dtype"], [rank[i] for rank in every]) for i, (c, b) in enumerate(cells)]


def sweep(opts: dict, say=lambda msg: None, case=make_case) -> dict:
    """Every backend x N x collective x size of ``opts["plan"]`` (one step per N,
    with its own collectives and sizes); a report ``{"results", "machine", "errors"}``.

    With ``opts["repeats"]`` K > 1, the cells below 1 MiB (and barrier) are
    measured K times, the backends taking turns, and each keeps the median
    (:func:`merge_repeats`): on a shared machine one pass can land in a slow
    moment of either backend. With ``opts["repeat_every_size"]`` (as
    ``--targets`` sets it) the cells of every size are repeated.

    ``case`` makes each rank's input and expected result on the simulator
    (default :func:`make_case`); a test passes a wrong one to see it counted.
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


# -- the edge: table, plot, options ---------------------------------------------------------
def format_table(rows: list[dict]) -> str:
    """nccl-tests-like columns, grouped by collective, then N, then backend."""
    head = ("collective", "N", "backend", "size", "dtype", "time(us)", "min(us)", "max(us)",
            "algbw(GB/s)", "busbw(GB/s)", "#wrong")
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    key = lambda r: (order.get(r["collective"], 99), r["n"], r["backend"], r["bytes"])
    bw = lambda v: "-" if v is None else f"{v:.3f}"
    size = lambda r: human_bytes(r["bytes"]) if r["collective"] != "barrier" else "-"
    lines = [(r["collective"], str(r["n"]), r["backend"], size(r),
              r["dtype"] or "-", f"{r['time_us']:.2f}", f"{r['time_min_us']:.2f}", f"{r['time_max_us']:.2f}",
              bw(r["algbw_GBps"]), bw(r["busbw_GBps"]), str(r["wrong"])) for r in sorted(rows, key=key)]
    return columns(head, lines, left=(True, False, True, False, True) + (False,) * 6)


def columns(head: tuple, lines: list, left: tuple) -> str:
    """``head`` and ``lines`` (tuples of strings) in aligned columns under a rule;
    ``left[i]``: column i is left-aligned (else right-aligned)."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if lf else c.rjust(w) for c, w, lf in zip(cells, widths, left)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines])


def plot(rows: list[dict], path: str) -> None:
    """Latency and bus bandwidth against message size (log-log), one row of two
    panels per collective, one line per backend and N. Needs matplotlib."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'simdist[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = [r for r in rows if r["collective"] != "barrier"]
    collectives = [c for c in COLLECTIVES if any(r["collective"] == c for r in sized)]
    if not collectives:
        raise RuntimeError("--plot: no sized results to plot (only barrier)")
    fig, axes = plt.subplots(len(collectives), 2, figsize=(11, 3.6 * len(collectives)), squeeze=False)
    for (lat, bus), collective in zip(axes, collectives):
        mine = [r for r in sized if r["collective"] == collective]
        for backend, n in sorted({(r["backend"], r["n"]) for r in mine}):
            line = sorted((r for r in mine if r["backend"] == backend and r["n"] == n), key=lambda r: r["bytes"])
            xs = [r["bytes"] for r in line]
            style = "-" if backend == "sim" else "--"
            lat.plot(xs, [r["time_us"] for r in line], style, marker="o", ms=3, label=f"{backend} N={n}")
            bus.plot(xs, [max(r["busbw_GBps"], 1e-9) for r in line], style, marker="o", ms=3, label=f"{backend} N={n}")
        for ax, what in ((lat, "time per call (µs)"), (bus, "bus bandwidth (GB/s)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size S (bytes)")
            ax.set_ylabel(what)
            ax.set_title(f"{collective}: {what.split(' (')[0]}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _list(kind: str, allowed: tuple, text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{kind}={text!r}: choose from {','.join(allowed)}")
    return items


def _ns(text: str) -> list[int]:
    try:
        ns = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise argparse.ArgumentTypeError(f"-n {text!r}: give world sizes >= 1, comma separated, e.g. 2,4,8")
    return ns


def _size_arg(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "bench",
        help="time the collectives over a range of message sizes, simulator and MPI (nccl-tests style)",
        description=("Time each collective at every power-of-two size from --min-bytes to --max-bytes, OSU-style "
                     "(warm-up, barrier, timed loop, barrier), on the simulator and on MPI (mpi4py under mpiexec). "
                     "Prints time per call (mean over ranks, min and max), algbw and busbw as nccl-tests define "
                     "them, and #wrong from checking every warm-up result and the last timed one. With --targets, "
                     "also measures copy bandwidth, world.run rate, start-up and a big world, and judges every "
                     "performance target (PASS/MISS). Exit status 1 when any result was wrong or MPI failed; a "
                     "MISS does not change it."),
        epilog="See docs/performance.md. Sizes take K, M, G (binary): 8, 1K, 64KiB, 64MiB.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    from . import _targets  # it imports this module

    p.add_argument("-n", "--ns", type=_ns, metavar="N,N,...",
                   help="world sizes (default 2,4,8; with --targets 2,4,8,16)")
    p.add_argument("--backend", type=lambda s: _list("--backend", ("sim", "mpi"), s), default=["sim", "mpi"],
                   metavar="sim,mpi", help="backends (default sim,mpi)")
    p.add_argument("--collective", type=lambda s: _list("--collective", COLLECTIVES, s), metavar="A,B,...",
                   help=f"collectives at every N (default {','.join(DEFAULT_COLLECTIVES)}; also reduce; "
                        "with --targets the targets' choice per N)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="element type (default float32)")
    p.add_argument("--min-bytes", type=_size_arg, default=8, metavar="SIZE", help="smallest size (default 8)")
    p.add_argument("--max-bytes", type=_size_arg, default=64 << 20, metavar="SIZE", help="largest size (default 64MiB)")
    p.add_argument("--warmup", type=int, default=500, help="warm-up calls below 1 MiB (default 500)")
    p.add_argument("--iters", type=int, default=5000, help="timed calls below 1 MiB, and barrier (default 5000)")
    p.add_argument("--large-warmup", type=int, default=10, help="warm-up calls from 1 MiB (default 10)")
    p.add_argument("--large-iters", type=int, default=100, help="timed calls from 1 MiB (default 100)")
    p.add_argument("--repeats", type=int, default=None, metavar="K",
                   help="measure the cells below 1 MiB K times, backends taking turns, and keep each cell's "
                        "median (default 1; with --targets 3, and every size)")
    p.add_argument("--timeout", type=float, default=300.0, help="simulator: seconds without progress before a hang (default 300)")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to use (default: simdist's choice, as simdist run)")
    p.add_argument("--mpi-args", type=str.split, default=[], help="extra mpiexec arguments, one quoted string")
    p.add_argument("--mpi-timeout", type=float, default=1800.0, help="seconds for one mpiexec sweep (default 1800)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': to stdout, instead of the table)")
    p.add_argument("--plot", metavar="FILE.png", help="also plot latency and busbw against size (needs matplotlib)")
    _targets.add_arguments(p)


def options(args: argparse.Namespace) -> dict:
    """The sweep's options from parsed arguments; ValueError names a bad one."""
    if args.max_bytes < args.min_bytes:
        raise ValueError(f"--min-bytes {args.min_bytes} is larger than --max-bytes {args.max_bytes}")
    for name in ("warmup", "iters", "large_warmup", "large_iters"):
        if getattr(args, name) < (1 if "iters" in name else 0):
            raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= {1 if 'iters' in name else 0}")
    if args.mpiexec is None:
        from .mpi._driver import find_mpiexec
        try:
            args.mpiexec = find_mpiexec()
        except Exception as exc:  # no MPI: fine for --backend sim
            if "mpi" in args.backend:
                raise ValueError(f"--backend mpi: {exc}") from None
            args.mpiexec = "mpiexec"
    from . import _targets  # it imports this module

    opts = {"ns": args.ns or [2, 4, 8], "backends": args.backend,
            "collectives": args.collective or list(DEFAULT_COLLECTIVES), "dtype": args.dtype,
            "sizes": sizes(args.min_bytes, args.max_bytes), "warmup": args.warmup, "iters": args.iters,
            "large_warmup": args.large_warmup, "large_iters": args.large_iters, "timeout": args.timeout,
            "mpiexec": args.mpiexec, "mpi_args": args.mpi_args, "mpi_timeout": args.mpi_timeout}
    opts["plan"] = [{"n": n, "collectives": opts["collectives"], "sizes": opts["sizes"]} for n in opts["ns"]]
    opts.update(_targets.options(args, opts))
    if args.repeats is not None and args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: must be >= 1")
    opts["repeats"] = args.repeats or (TARGET_REPEATS if opts["targets"] else 1)
    return opts


def run(args: argparse.Namespace, case=make_case) -> int:
    """Run ``simdist bench`` with parsed ``args``; return the exit status."""
    try:
        opts = options(args)
    except ValueError as exc:
        print(f"simdist bench: error: {exc}", file=sys.stderr)
        return 2
    from . import _targets  # it imports this module

    say = lambda msg: print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
    try:
        report = sweep(opts, say, case)
        if opts["targets"]:
            _targets.add_to(report, opts, say)
    except KeyboardInterrupt:
        print("simdist bench: interrupted", file=sys.stderr)
        return 130
    report["options"] = {k: v for k, v in opts.items()}
    if args.json != "-":
        m = report["machine"]
        print(f"# simdist bench  {m['date']}  {m['cpus_usable']} CPUs ({m['cpu_model']})  Python {m['python']}  "
              f"numpy {m['numpy']}  mpi4py {m['mpi4py']}  {m['mpiexec']}  load {m['loadavg_start'][0]:.1f}"
              f"->{m['loadavg_end'][0]:.1f}; S as nccl-tests; #wrong: every warm-up result and the last timed one")
        print(format_table(report["results"]))
        if opts["targets"]:
            copy = report["machine"]["copy_bandwidth"]
            print(f"\n# targets: sim/reference of the mean time per call over ranks; copy bandwidth {copy['GBps']:.2f} "
                  f"GB/s (numpy.copyto of {human_bytes(copy['bytes'])}, median of {copy['repeats']})")
            print(_targets.format_targets(report["targets"]))
    if args.json:
        json_report.write(report, args.json)
    status = 0
    for err in report["errors"]:
        print(f"simdist bench: error: {err}", file=sys.stderr)
        status = 1
    if args.plot:
        try:
            plot(report["results"], args.plot)
        except RuntimeError as exc:
            print(f"simdist bench: error: {exc}", file=sys.stderr)
            status = 1
    wrong = sum(r["wrong"] for r in report["results"])
    wrong += sum((report.get(key) or {}).get("wrong", 0) for key in ("run_rate", "big_world"))
    if wrong:
        print(f"simdist bench: {wrong} wrong result(s)", file=sys.stderr)
        status = 1
    return status


def _main(argv: list[str] | None = None) -> int:
    """``python -m simdist._bench_cli``: the MPI worker mode, or the command on its own."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--mpi-worker"]:
        mpi_worker(json.loads(argv[1]))
        return 0
    parser = argparse.ArgumentParser(prog="simdist bench")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
