"""The performance targets of ``simdist bench --targets``, and the measurements that are not sweeps.

The targets compare the simulator with Open MPI, or with the machine itself,
measured on the same machine in the same run. A ratio is the simulator's
mean time per call over ranks divided by Open MPI's, from the sweep's rows:

======================================  ===========================================  =================
target                                  figure                                       limit
======================================  ===========================================  =================
allreduce >= 1 MiB, N=2 and 4           the worst sim/MPI from 1 MiB to --max-bytes  ratio <= 0.8
allreduce 8 B and barrier, N=2 and 4    sim/MPI                                      ratio <= 2
each default collective, N=8 and 16     the worst sim/MPI over every size swept      ratio <= 1
allreduce busbw, N=2 and 4              busbw of the largest allreduce / copy bw     ratio >= 0.5
world.run rate, N=4                     world.run calls per second                   value >= 300/s
start-up, N=8                           World(8) + one run / mpiexec -n 8 python     ratio <= 0.25
big world, N=256                        start, 1 MiB allreduce, close; memory        (reported)
======================================  ===========================================  =================

The copy bandwidth is the median over a few ``numpy.copyto`` of a float32
array as large as the sweep's largest size (64 MiB by default) into
another: bytes copied / seconds. The sweep at N >= 8 stops at ``--cap-bytes``
(16 MiB by default) to keep a whole default run near a quarter of an hour
on 2 CPUs; the targets of N=8 and 16 then say so.

:func:`verdicts` is pure: rows and measurements in, one dict per target out.
A verdict is PASS or MISS against the limit, REPORTED (no limit), NO MPI
(no Open MPI figure to compare with: ``--backend sim``, or the MPI side
failed) or NOT RUN (the run measured nothing for it: an N not in ``-n``, a
size outside the sweep, a measurement turned off). A verdict never changes
the exit status.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from . import World
from ._bench_cli import (
    DEFAULT_COLLECTIVES, columns, human_bytes, layout, mpiexec_command, parse_bytes, run_mpiexec, sim_body,
)

__all__ = ["add_arguments", "options", "measure", "add_to", "verdicts", "format_targets"]

TARGET_NS = (2, 4, 8, 16)
PAIR_NS = (2, 4)  # allreduce and barrier against Open MPI
WIDE_NS = (8, 16)  # more ranks than the 2 CPUs of the reference machine: every default collective
PAIR_COLLECTIVES = ("allreduce", "barrier")
CAP_BYTES = 16 << 20
RUNS, RUN_N, RUN_RATE = 500, 4, 300.0
STARTUP_N, STARTUP_REPEATS, STARTUP_LIMIT = 8, 5, 0.25
BIG_N, BIG_BYTES = 256, 1 << 20
COPY_REPEATS, BUSBW_SHARE = 5, 0.5
VERDICTS = ("PASS", "MISS", "REPORTED", "NO MPI", "NOT RUN")


# -- options ---------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--targets`` and the options that shrink it (each refused without ``--targets``)."""
    p.add_argument("--targets", action="store_true",
                   help="also measure and judge every performance target (defaults: -n 2,4,8,16; allreduce,barrier "
                        "at N < 8, the default collectives from N = 8)")
    p.add_argument("--cap-bytes", type=_size, metavar="SIZE",
                   help=f"with --targets: the largest size at N >= 8 (default {human_bytes(CAP_BYTES)}, "
                        "or --max-bytes if smaller)")
    p.add_argument("--runs", type=int, metavar="K",
                   help=f"with --targets: world.run calls timed at N={RUN_N} (default {RUNS}; 0: skip)")
    p.add_argument("--startup-repeats", type=int, metavar="K",
                   help=f"with --targets: starts of World({STARTUP_N}) and of mpiexec -n {STARTUP_N} to take the "
                        f"median of (default {STARTUP_REPEATS}; 0: skip)")
    p.add_argument("--big-n", type=int, metavar="N",
                   help=f"with --targets: ranks of the big world (default {BIG_N}; 0: skip)")


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options(args: argparse.Namespace, opts: dict) -> dict:
    """What ``--targets`` adds to the sweep's ``opts``: ``{"targets": False}`` without it;
    with it, the plan (collectives and sizes per N) and the measurements' options.
    ValueError names a bad option."""
    own = {"cap_bytes": args.cap_bytes, "runs": args.runs, "startup_repeats": args.startup_repeats,
           "big_n": args.big_n}
    if not args.targets:
        for name, value in own.items():
            if value is not None:
                raise ValueError(f"--{name.replace('_', '-')} {value}: applies only with --targets; add --targets")
        return {"targets": False}
    if args.dtype != "float32":
        raise ValueError(f"--dtype {args.dtype}: the targets are defined on float32; drop --dtype")
    defaults = {"cap_bytes": CAP_BYTES, "runs": RUNS, "startup_repeats": STARTUP_REPEATS, "big_n": BIG_N}
    own = {k: defaults[k] if v is None else v for k, v in own.items()}
    for name in ("runs", "startup_repeats", "big_n"):
        if own[name] < 0:
            raise ValueError(f"--{name.replace('_', '-')} {own[name]}: must be >= 0 (0 skips it)")
    if own["cap_bytes"] < opts["sizes"][0]:
        raise ValueError(f"--cap-bytes {own['cap_bytes']} is smaller than --min-bytes {opts['sizes'][0]}")
    ns = args.ns or list(TARGET_NS)
    plan = []
    for n in ns:
        wide = n >= WIDE_NS[0]
        collectives = args.collective or list(DEFAULT_COLLECTIVES if wide else PAIR_COLLECTIVES)
        top = own["cap_bytes"] if wide else opts["sizes"][-1]
        plan.append({"n": n, "collectives": collectives, "sizes": [b for b in opts["sizes"] if b <= top]})
    capped = any(step["sizes"] != opts["sizes"] for step in plan)
    # Every size in --repeats passes: the cells from 1 MiB add about 3 minutes to 20.
    return {"targets": True, "ns": ns, "plan": plan, **own, "capped_at": own["cap_bytes"] if capped else None,
            "copy_bytes": opts["sizes"][-1], "repeat_every_size": True}


# -- the measurements that are not sweeps --------------------------------------------------
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
    "run_rate", "startup", "big_world", "errors"}``, None for one turned off."""
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


def add_to(report: dict, opts: dict, say) -> None:
    """Add to the sweep's ``report`` the measurements of :func:`measure` (the copy
    bandwidth under ``machine``, its errors to ``errors``) and the ``targets``."""
    measured = measure(opts, say)
    report["errors"] += measured.pop("errors")
    report["machine"]["copy_bandwidth"] = copy = measured.pop("copy_bandwidth")
    report["machine"]["loadavg_end"] = os.getloadavg()
    report.update(measured)
    report["targets"] = verdicts(report["results"], copy, measured["run_rate"], measured["startup"],
                                 measured["big_world"], opts["capped_at"])


# -- the verdicts (pure) ---------------------------------------------------------------------
def _target(name: str, verdict: str, limit: str, detail: str, value=None, reference=None, unit=None,
            ratio=None, cell=None) -> dict:
    return {"name": name, "value": value, "reference": reference, "unit": unit, "ratio": ratio, "limit": limit,
            "verdict": verdict, "detail": detail, "cell": cell}


def _versus_mpi(name: str, rows: list[dict], collective: str, n: int, select, limit: float, what: str,
                note: str = "") -> dict:
    """The worst sim/MPI time ratio over the rows of ``collective`` at ``n``
    whose bytes ``select`` accepts; PASS when it is at most ``limit``."""
    pick = lambda backend: {r["bytes"]: r for r in rows if r["backend"] == backend and r["collective"] == collective
                            and r["n"] == n and select(r["bytes"])}
    sim, mpi = pick("sim"), pick("mpi")
    rule = f"ratio <= {limit:g}"
    if not any(r["n"] == n for r in rows):
        return _target(name, "NOT RUN", rule, f"N={n} was not measured (-n)")
    if not sim:
        return _target(name, "NOT RUN", rule, f"no simulator figure for {collective} at N={n}{what}")
    pairs = sorted((sim[b]["time_us"] / mpi[b]["time_us"], b) for b in sim if b in mpi)
    if not pairs:
        only = next(iter(sim.values())) if len(sim) == 1 else None
        return _target(name, "NO MPI", rule, "no Open MPI figure (--backend sim, or the MPI side failed)",
                       value=only["time_us"] if only else None, unit="us")
    ratio, b = pairs[-1]
    sized = collective != "barrier"
    if len(pairs) > 1:
        lo, hi = min(sim), max(sim)
        detail = f"worst at {human_bytes(b)}, of {len(pairs)} sizes {human_bytes(lo)}-{human_bytes(hi)}"
    else:
        detail = f"at {human_bytes(b)}" if sized else "-"
    if len(pairs) < len(sim):
        detail += f"; {len(sim) - len(pairs)} size(s) without an Open MPI figure"
    if sim[b].get("repeats", 1) > 1:
        spread = lambda r: f"{min(r['time_us_runs']):.3g}-{max(r['time_us_runs']):.3g}"
        detail += f"; median of {sim[b]['repeats']} passes (sim {spread(sim[b])}, MPI {spread(mpi[b])} us)"
    return _target(name, "PASS" if ratio <= limit else "MISS", rule, detail + note, value=sim[b]["time_us"],
                   reference=mpi[b]["time_us"], unit="us", ratio=ratio,
                   cell={"collective": collective, "n": n, "bytes": b})


def _busbw(rows: list[dict], n: int, copy: dict | None) -> dict:
    name, rule = f"allreduce busbw / copy bandwidth, N={n}", f"ratio >= {BUSBW_SHARE:g}"
    if copy is None:
        return _target(name, "NOT RUN", rule, "no copy bandwidth measured")
    row = next((r for r in rows if r["backend"] == "sim" and r["collective"] == "allreduce" and r["n"] == n
                and r["bytes"] == copy["bytes"]), None)
    if row is None:
        return _target(name, "NOT RUN", rule, f"no simulator allreduce of {human_bytes(copy['bytes'])} at N={n}")
    ratio = row["busbw_GBps"] / copy["GBps"]
    return _target(name, "PASS" if ratio >= BUSBW_SHARE else "MISS", rule,
                   f"{human_bytes(copy['bytes'])} allreduce vs numpy.copyto of {human_bytes(copy['bytes'])}",
                   value=row["busbw_GBps"], reference=copy["GBps"], unit="GB/s", ratio=ratio,
                   cell={"collective": "allreduce", "n": n, "bytes": row["bytes"]})


def _rate(rate: dict | None) -> dict:
    name, rule = f"world.run rate, N={RUN_N}", f"value >= {RUN_RATE:g}/s"
    if rate is None:
        return _target(name, "NOT RUN", rule, "--runs 0")
    value = rate["per_second"]
    return _target(name, "PASS" if value >= RUN_RATE else "MISS", rule,
                   f"{rate['runs']} runs of a 2-float32 allreduce", value=value, unit="runs/s")


def _startup(start: dict | None) -> dict:
    name, rule = f"start-up, N={STARTUP_N}", f"ratio <= {STARTUP_LIMIT:g}"
    if start is None:
        return _target(name, "NOT RUN", rule, "--startup-repeats 0")
    what = f"World({start['n']}) + one run vs mpiexec -n {start['n']} python -c 'from mpi4py import MPI'"
    if start["mpi_s"] is None:
        return _target(name, "NO MPI", rule, what + ": no Open MPI figure", value=start["sim_s"], unit="s")
    ratio = start["sim_s"] / start["mpi_s"]
    return _target(name, "PASS" if ratio <= STARTUP_LIMIT else "MISS", rule,
                   f"{what}, median of {len(start['sim_all_s'])} each", value=start["sim_s"], reference=start["mpi_s"],
                   unit="s", ratio=ratio)


def _big(big: dict | None) -> dict:
    if big is None:
        return _target("big world", "NOT RUN", "-", "--big-n 0")
    total = big["start_s"] + big["noop_run_s"] + big["allreduce_run_s"] + big["close_s"]
    detail = (f"start {big['start_s']:.2f} s, trivial run {big['noop_run_s']:.2f} s, {human_bytes(big['bytes'])} "
              f"allreduce run {big['allreduce_run_s']:.2f} s (in ranks <= {big['allreduce_in_rank_max_s']:.2f} s), "
              f"close {big['close_s']:.2f} s; PSS of {big['processes']} processes "
              f"{big['pss_bytes'] / 2**20:.0f} MiB, arena {big['arena_bytes'] / 2**20:.0f} MiB; wrong {big['wrong']}")
    return _target(f"big world, N={big['n']}", "REPORTED", "-", detail, value=total, unit="s")


def verdicts(rows: list[dict], copy: dict | None = None, rate: dict | None = None, start: dict | None = None,
             big: dict | None = None, capped_at: int | None = None) -> list[dict]:
    """Every target, in a fixed order, judged on the sweep's ``rows`` and the
    measurements (:func:`copy_bandwidth`, :func:`run_rate`, :func:`world_startup` with
    :func:`mpiexec_startup`,
    :func:`big_world`; None: not measured). ``capped_at``: the sweep at N >= 8
    stopped at that size, which the targets of N=8 and 16 say.

    Each target is a dict: ``name``; ``value`` (the simulator's figure) and
    ``reference`` (Open MPI's, or the copy bandwidth) in ``unit``; ``ratio``;
    ``limit`` (``"ratio <= 0.8"``, ``"value >= 300/s"``, ``"-"``); ``verdict``
    (one of :data:`VERDICTS`); ``detail`` (the worst cell, or why there is no
    figure); ``cell`` (the worst cell's collective, n and bytes, or None).
    """
    out = []
    for n in PAIR_NS:
        out.append(_versus_mpi(f"allreduce >= 1 MiB, N={n}", rows, "allreduce", n, lambda b: b >= 1 << 20, 0.8,
                               " of 1 MiB or more"))
    for n in PAIR_NS:
        out.append(_versus_mpi(f"allreduce 8 B, N={n}", rows, "allreduce", n, lambda b: b == 8, 2.0, " of 8 B"))
        out.append(_versus_mpi(f"barrier, N={n}", rows, "barrier", n, lambda b: True, 2.0, ""))
    note = f"; sizes capped at {human_bytes(capped_at)} (--cap-bytes)" if capped_at else ""
    for n in WIDE_NS:
        for c in DEFAULT_COLLECTIVES:
            sized = c != "barrier"
            out.append(_versus_mpi(f"{c}, N={n}{', every size' if sized else ''}", rows, c, n, lambda b: True, 1.0,
                                   "", note if sized else ""))
    out += [_busbw(rows, n, copy) for n in PAIR_NS]
    out += [_rate(rate), _startup(start), _big(big)]
    return out


# -- the edge: the table -------------------------------------------------------------------------
def _figure(value, unit) -> str:
    if value is None:
        return "-"
    formats = {"us": f"{value:.2f} us", "GB/s": f"{value:.2f} GB/s", "runs/s": f"{value:.0f}/s"}
    return formats.get(unit, f"{value:.3f} s")


def format_targets(items: list[dict]) -> str:
    """The targets as a table: name, simulator, reference, ratio, limit, verdict, detail."""
    head = ("target", "simulator", "reference", "ratio", "limit", "verdict", "detail")
    lines = [(t["name"], _figure(t["value"], t["unit"]), _figure(t["reference"], t["unit"]),
              "-" if t["ratio"] is None else f"{t['ratio']:.2f}", t["limit"], t["verdict"], t["detail"])
             for t in items]
    return columns(head, lines, left=(True, False, False, False, True, True, True))
