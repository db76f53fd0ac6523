"""The performance targets of ``simdist bench --targets``: the plan of the run and the verdicts.

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

The measurements besides the sweep are :mod:`simdist.bench.measurements`'.
The sweep at N >= 8 stops at ``--cap-bytes``
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

import os

from .cells import DEFAULT_COLLECTIVES, human_bytes
from .measurements import RUN_N, STARTUP_N, measure

__all__ = ["TARGET_NS", "VERDICTS", "plan", "verdicts", "add_to"]

TARGET_NS = (2, 4, 8, 16)
PAIR_NS = (2, 4)  # allreduce and barrier against Open MPI
WIDE_NS = (8, 16)  # more ranks than the 2 CPUs of the reference machine: every default collective
PAIR_COLLECTIVES = ("allreduce", "barrier")
CAP_BYTES = 16 << 20
RUNS, RUN_RATE = 500, 300.0
STARTUP_REPEATS, STARTUP_LIMIT = 5, 0.25
BIG_N = 256
BUSBW_SHARE = 0.5
REPEATS = 3  # passes of every cell: the median of 3
VERDICTS = ("PASS", "MISS", "REPORTED", "NO MPI", "NOT RUN")
#: What each measurement besides the sweep defaults to (0 turns one off).
MEASUREMENT_DEFAULTS = {"runs": RUNS, "startup_repeats": STARTUP_REPEATS, "big_n": BIG_N}


def plan(sizes: list[int], ns=None, collectives=None, cap_bytes: int = CAP_BYTES) -> dict:
    """The sweep the targets need: one step per N (default :data:`TARGET_NS`),
    allreduce and barrier below N = 8 and the default collectives from it
    (``collectives`` given: those at every N), ``sizes`` up to ``cap_bytes``
    from N = 8; every size in :data:`REPEATS` passes. Returns the options
    this adds to the sweep's (``plan``, ``ns``, ``capped_at``, ``copy_bytes``, ...)."""
    if cap_bytes < sizes[0]:
        raise ValueError(f"--cap-bytes {cap_bytes} is smaller than --min-bytes {sizes[0]}")
    ns = list(ns or TARGET_NS)
    steps = []
    for n in ns:
        wide = n >= WIDE_NS[0]
        chosen = list(collectives or (DEFAULT_COLLECTIVES if wide else PAIR_COLLECTIVES))
        top = cap_bytes if wide else sizes[-1]
        steps.append({"n": n, "collectives": chosen, "sizes": [b for b in sizes if b <= top]})
    capped = any(step["sizes"] != sizes for step in steps)
    # Every size in the repeated passes: the cells from 1 MiB add about 3 minutes to 20.
    return {"targets": True, "ns": ns, "plan": steps, "cap_bytes": cap_bytes,
            "capped_at": cap_bytes if capped else None, "copy_bytes": sizes[-1], "repeat_every_size": True}


def add_to(report: dict, opts: dict, say) -> None:
    """Add to the sweep's ``report`` the measurements of
    :func:`simdist.bench.measurements.measure` (the copy bandwidth under
    ``machine``, its errors to ``errors``) and the ``targets``."""
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
    measurements (of :mod:`simdist.bench.measurements`;
    None: not measured). ``capped_at``: the sweep at N >= 8
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
