"""Benchmark: the simulator side by side with Open MPI (mpi4py), same machine, same run.

``python -m simdist.bench [--json FILE]`` measures allreduce (float32, OSU-style:
warm-up, barrier, timed loop, barrier; each rank's mean time per call, then
min/avg/max over ranks; exact small-integer data, so wrong results are counted)
and barrier on both backends; ``World.run`` round trips; start-up of
``World(8)`` versus ``mpiexec``; and a big world (start, allreduce, memory).
The MPI side is this module in worker mode (``--mpi-worker SPEC``) under
``mpiexec``, with ``comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)`` on numpy
arrays, mpi4py's fastest path. Only simdist's public API is used. Functions
return data; printing and JSON happen at the edge (``print_report``, ``main``).
See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import World  # the public API only

DTYPE = np.float32
SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20)
LARGE = 1 << 20  # messages of at least this many bytes use the "large" iteration counts


# -- data and the rank bodies -------------------------------------------------------
def pattern(rank: int, count: int) -> np.ndarray:
    """Rank ``rank``'s input: small integers, so any summation order is exact."""
    return (np.arange(count) % 7 + rank + 1).astype(DTYPE)


def expected(size: int, count: int) -> np.ndarray:
    return (np.arange(count) % 7 * size + size * (size + 1) // 2).astype(DTYPE)


def iterations(nbytes: int, opts: dict) -> tuple[int, int]:
    """(warm-up, timed) call counts for a message of ``nbytes``."""
    large = nbytes >= LARGE
    return opts["large_warmup" if large else "warmup"], opts["large_iters" if large else "iters"]


def sim_allreduce(comm, nbytes: int, warmup: int, iters: int) -> tuple[float, int]:
    """Mean µs per ``comm.allreduce`` on this rank, and the number of wrong results."""
    count = max(1, nbytes // DTYPE().itemsize)
    x, want = pattern(comm.rank, count), expected(comm.size, count)
    wrong = sum(not np.array_equal(comm.allreduce(x), want) for _ in range(warmup))
    comm.barrier()
    out, start = None, time.perf_counter()
    for _ in range(iters):
        out = comm.allreduce(x)
    elapsed = time.perf_counter() - start
    comm.barrier()
    return elapsed / iters * 1e6, wrong + int(not np.array_equal(out, want))


def mpi_allreduce(comm, MPI, nbytes: int, warmup: int, iters: int) -> tuple[float, int]:
    """The same measurement with mpi4py's buffer API."""
    count = max(1, nbytes // DTYPE().itemsize)
    x, want = pattern(comm.rank, count), expected(comm.size, count)
    out = np.empty_like(x)
    wrong = 0
    for _ in range(warmup):
        out[...] = 0
        comm.Allreduce(x, out, op=MPI.SUM)
        wrong += not np.array_equal(out, want)
    out[...] = 0
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(x, out, op=MPI.SUM)
    elapsed = time.perf_counter() - start
    comm.Barrier()
    return elapsed / iters * 1e6, wrong + int(not np.array_equal(out, want))


def timed_barriers(barrier, warmup: int, iters: int) -> tuple[float, int]:
    for _ in range(warmup):
        barrier()
    start = time.perf_counter()
    for _ in range(iters):
        barrier()
    return (time.perf_counter() - start) / iters * 1e6, 0


def _tiny(comm) -> bool:
    return bool(comm.allreduce(np.ones(2, DTYPE))[0] == comm.size)


def _noop(comm) -> int:
    return comm.rank


def record(backend: str, collective: str, n: int, nbytes: int, per_rank: list) -> dict:
    times = [t for t, _ in per_rank]
    return {"backend": backend, "collective": collective, "n": n, "bytes": nbytes,
            "dtype": "float32" if collective == "allreduce" else None,
            "time_us": statistics.fmean(times), "min_us": min(times), "max_us": max(times),
            "wrong": sum(w for _, w in per_rank), "rank_us": times}


def best_of(rows: list[dict]) -> list[dict]:
    """One record per (backend, collective, n, bytes): the repeat with the lowest
    mean, its wrong count summed over every repeat, every repeat's mean kept."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["backend"], r["collective"], r["n"], r["bytes"]), []).append(r)
    return [dict(min(g, key=lambda r: r["time_us"]), wrong=sum(r["wrong"] for r in g),
                 repeats_us=[r["time_us"] for r in g]) for g in groups.values()]


# -- the two backends ---------------------------------------------------------------
def sim_sweep(n: int, opts: dict) -> list[dict]:
    """Allreduce at every size, then barrier, on one simulated world of ``n`` ranks."""
    with World(n) as world:
        rows = [record("sim", "allreduce", n, b, world.run(sim_allreduce, b, *iterations(b, opts)))
                for b in opts["sizes"]]
        per_rank = world.run(lambda comm: timed_barriers(comm.barrier, opts["warmup"], opts["iters"]))
        rows.append(record("sim", "barrier", n, 0, per_rank))
    return rows


def mpi_worker(opts: dict) -> None:
    """Body of ``--mpi-worker``: every rank measures; rank 0 writes the records."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mine = [mpi_allreduce(comm, MPI, b, *iterations(b, opts)) for b in opts["sizes"]]
    mine.append(timed_barriers(comm.Barrier, opts["warmup"], opts["iters"]))
    every = comm.gather(mine, root=0)
    if comm.rank == 0:
        rows = [record("mpi", "allreduce", comm.size, b, [e[i] for e in every]) for i, b in enumerate(opts["sizes"])]
        rows.append(record("mpi", "barrier", comm.size, 0, [e[-1] for e in every]))
        with open(opts["out"], "w") as fh:
            json.dump({"rows": rows, "library": MPI.Get_library_version().splitlines()[0]}, fh)


def mpiexec_command(n: int, opts: dict) -> list[str]:
    from .mpi._driver import flavor  # Open MPI alone needs (and accepts) --oversubscribe

    cmd = [opts["mpiexec"], "-n", str(n)]
    crowded = n > len(os.sched_getaffinity(0)) and flavor(opts["mpiexec"]) == "openmpi"
    return cmd + (["--oversubscribe"] if crowded else []) + opts["mpi_args"]


def mpi_env() -> dict:
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpi_sweep(n: int, opts: dict) -> list[dict]:
    """Run this module's worker mode under ``mpiexec -n n``; return its records."""
    with tempfile.TemporaryDirectory(prefix="simdist-bench-") as tmp:
        spec = {k: opts[k] for k in ("sizes", "warmup", "iters", "large_warmup", "large_iters")}
        spec["out"] = os.path.join(tmp, "out.json")
        cmd = mpiexec_command(n, opts) + [sys.executable, "-m", "simdist.bench", "--mpi-worker", json.dumps(spec)]
        proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=opts["mpi_timeout"])
        if proc.returncode != 0 or not os.path.exists(spec["out"]):
            raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(spec["out"]) as fh:
            return json.load(fh)["rows"]


# -- world.run rate, start-up, a big world ------------------------------------------------
def run_rate(n: int, runs: int) -> dict:
    """``World.run`` round trips per second, each with a tiny allreduce inside."""
    with World(n) as world:
        for _ in range(min(runs, 20)):
            world.run(_tiny)
        ok, start = True, time.perf_counter()
        for _ in range(runs):
            ok &= all(world.run(_tiny))
        seconds = time.perf_counter() - start
    return {"n": n, "runs": runs, "seconds": seconds, "per_second": runs / seconds, "wrong": int(not ok)}


def startup(n: int, repeats: int, mpi_repeats: int, opts: dict | None) -> dict:
    """Median wall time of ``World(n)`` + one trivial run (and of closing it),
    versus ``mpiexec -n n python -c "from mpi4py import MPI"`` (``opts`` None: skip MPI)."""
    starts, closes = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        world = World(n)
        world.run(_noop)
        t1 = time.perf_counter()
        world.close()
        starts.append(t1 - t0)
        closes.append(time.perf_counter() - t1)
    out = {"n": n, "sim_s": statistics.median(starts), "sim_all_s": starts,
           "sim_close_s": statistics.median(closes), "mpi_s": None, "mpi_all_s": []}
    if opts is not None:
        cmd = mpiexec_command(n, opts) + [sys.executable, "-c", "from mpi4py import MPI"]
        for _ in range(mpi_repeats):
            t0 = time.perf_counter()
            subprocess.run(cmd, env=mpi_env(), check=True, capture_output=True, timeout=opts["mpi_timeout"])
            out["mpi_all_s"].append(time.perf_counter() - t0)
        out["mpi_s"] = statistics.median(out["mpi_all_s"])
        out["mpi_command"] = " ".join(cmd)
    return out


def pss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return sum(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))


def arena_bytes() -> int:
    """Size of the simdist shared-memory mappings of this process (from /proc/self/maps)."""
    with open("/proc/self/maps") as fh:
        spans = [line.split()[0].split("-") for line in fh if "memfd:simdist-" in line]
    return sum(int(hi, 16) - int(lo, 16) for lo, hi in spans)


def _big_allreduce(comm, nbytes):
    return sim_allreduce(comm, nbytes, 0, 1)


def big_world(n: int, nbytes: int) -> dict:
    """Start ``World(n)``, run a trivial function, run one allreduce of ``nbytes``
    (memory is sampled right after it), close; wall times and memory."""
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


# -- targets and machine ------------------------------------------------------------------
def targets(rows: list[dict], rate: dict | None, start: dict | None, sizes) -> list[dict]:
    """Each target: the sim and MPI figures, their ratio, the limit and PASS/MISS."""
    by = {(r["backend"], r["collective"], r["n"], r["bytes"]): r["time_us"] for r in rows}
    out = []

    def ratio_target(name, n, b, limit):
        sim, mpi = by.get(("sim", "allreduce", n, b)), by.get(("mpi", "allreduce", n, b))
        if sim is not None and mpi is not None:
            ratio = sim / mpi
            out.append({"name": name, "sim": sim, "mpi": mpi, "ratio": ratio, "limit": f"sim/MPI <= {limit}",
                        "verdict": "PASS" if ratio <= limit else "MISS"})

    for n in (2, 4):
        for b in sizes:
            if b >= LARGE:
                ratio_target(f"allreduce N={n} {_human(b)}", n, b, 0.8)
        ratio_target(f"allreduce N={n} 8 B", n, 8, 2.0)
    for b in sizes:
        ratio_target(f"allreduce N=8 {_human(b)} (oversubscribed)", 8, b, 1.0)
    if rate is not None:
        out.append({"name": f"world.run rate N={rate['n']}", "sim": rate["per_second"], "mpi": None, "ratio": None,
                    "limit": ">= 300 runs/s", "verdict": "PASS" if rate["per_second"] >= 300 else "MISS"})
    if start is not None and start["mpi_s"]:
        ratio = start["sim_s"] / start["mpi_s"]
        out.append({"name": f"start-up N={start['n']}", "sim": start["sim_s"], "mpi": start["mpi_s"], "ratio": ratio,
                    "limit": "sim/MPI <= 0.25", "verdict": "PASS" if ratio <= 0.25 else "MISS"})
    return out


def _first_line(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def machine(opts: dict) -> dict:
    try:
        import mpi4py
    except ImportError:
        mpi4py = None
    with open("/proc/cpuinfo") as fh:
        model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "?")
    ompi = _first_line([opts["mpiexec"], "--version"])
    commit = _first_line(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always", "--dirty"])
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "mpi4py": mpi4py and mpi4py.__version__, "mpiexec": ompi, "simdist_commit": commit, "loadavg_start": os.getloadavg()}


# -- the edge: options, progress, table ----------------------------------------------------
def _human(nbytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def _bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def format_table(rows: list[dict]) -> str:
    key = lambda r: (r["collective"] != "allreduce", r["n"], r["bytes"])
    pairs: dict = {}
    for r in rows:
        pairs.setdefault((r["collective"], r["n"], r["bytes"]), {})[r["backend"]] = r
    lines = [f"{'collective':<10} {'N':>3} {'size':>8} | {'sim avg µs':>11} {'(min-max)':>19} | "
             f"{'MPI avg µs':>11} {'(min-max)':>19} | {'sim/MPI':>7} | wrong sim/mpi"]
    for (coll, n, b), pair in sorted(pairs.items(), key=lambda kv: key(kv[1].get("sim") or kv[1]["mpi"])):
        cells, ratio = [], "-"
        for backend in ("sim", "mpi"):
            r = pair.get(backend)
            spread = f"({r['min_us']:.1f}-{r['max_us']:.1f})" if r else ""
            cells.append(f"{r['time_us']:>11.1f} {spread:>19}" if r else f"{'-':>11} {'':>19}")
        if "sim" in pair and "mpi" in pair:
            ratio = f"{pair['sim']['time_us'] / pair['mpi']['time_us']:.2f}"
        wrong = "/".join(str(pair[b]["wrong"]) if b in pair else "-" for b in ("sim", "mpi"))
        lines.append(f"{coll:<10} {n:>3} {_human(b) if coll == 'allreduce' else '-':>8} | {cells[0]} | {cells[1]} | {ratio:>7} | {wrong}")
    return "\n".join(lines)


def format_targets(items: list[dict]) -> str:
    figure = lambda t: f"{t['ratio']:.2f}" if t["ratio"] is not None else f"{t['sim']:.0f}/s"
    return "\n".join(f"  {t['verdict']:<4}  {t['name']:<36} {figure(t):>8}   target {t['limit']}" for t in items)


def measure(opts: dict, say) -> dict:
    """Every measurement the options ask for, as one report (``say`` gets progress lines)."""
    report = {"machine": machine(opts), "options": {k: v for k, v in opts.items() if k != "mpi_worker"}, "errors": []}
    rows, total = [], opts["repeats"]
    for rep in range(1, total + 1):
        for n in opts["ns"]:
            say(f"simulator, N={n} (repeat {rep}/{total})")
            rows += sim_sweep(n, opts)
            if not opts["no_mpi"]:
                say(f"Open MPI, N={n} (repeat {rep}/{total}): {' '.join(mpiexec_command(n, opts))}")
                try:
                    rows += mpi_sweep(n, opts)
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    report["errors"].append(f"MPI N={n}: {exc}")
    report["results"] = best_of(rows)
    if opts["runs"]:
        say(f"World.run rate, N={opts['run_n']}")
        report["run_rate"] = run_rate(opts["run_n"], opts["runs"])
    if opts["startup_repeats"]:
        say(f"start-up, N={opts['startup_n']}")
        report["startup"] = startup(opts["startup_n"], opts["startup_repeats"], opts["mpi_startup_repeats"],
                                    None if opts["no_mpi"] else opts)
    if opts["big_n"]:
        say(f"big world, N={opts['big_n']}")
        report["big_world"] = big_world(opts["big_n"], opts["big_bytes"])
    report["targets"] = targets(report["results"], report.get("run_rate"), report.get("startup"), opts["sizes"])
    report["machine"]["loadavg_end"] = os.getloadavg()
    return report


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"simdist bench  {m['date']}  simdist {m['simdist_commit']}  {m['cpus_usable']} CPUs ({m['cpu_model']})  "
          f"Python {m['python']}  numpy {m['numpy']}  mpi4py {m['mpi4py']}  {m['mpiexec']}  load average "
          f"{m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end")
    print(format_table(report["results"]))
    if "run_rate" in report:
        r = report["run_rate"]
        print(f"\nWorld.run round trips, N={r['n']}: {r['per_second']:.0f}/s ({r['runs']} runs, wrong {r['wrong']})")
    if "startup" in report:
        s = report["startup"]
        mpi = f"{s['mpi_s'] * 1000:.0f} ms" if s["mpi_s"] else "-"
        print(f"start-up, N={s['n']}: World + one run {s['sim_s'] * 1000:.0f} ms (close {s['sim_close_s'] * 1000:.0f} ms)"
              f" vs mpiexec + import mpi4py {mpi}")
    if "big_world" in report:
        b = report["big_world"]
        print(f"World({b['n']}): start {b['start_s']:.2f} s, trivial run {b['noop_run_s']:.2f} s, {_human(b['bytes'])} "
              f"allreduce run {b['allreduce_run_s']:.2f} s (in ranks <= {b['allreduce_in_rank_max_s']:.2f} s), close "
              f"{b['close_s']:.2f} s; PSS of {b['processes']} processes {b['pss_bytes'] / 2**20:.0f} MiB, "
              f"arena {b['arena_bytes'] / 2**20:.0f} MiB mapped, wrong {b['wrong']}")
    print("\ntargets:\n" + format_targets(report["targets"]))
    for err in report["errors"]:
        print(f"error: {err}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simdist.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--ns", type=lambda s: [int(v) for v in s.split(",")], default=[2, 4, 8],
                   help="world sizes for the sweeps (default 2,4,8)")
    p.add_argument("--sizes", type=lambda s: [_bytes(v) for v in s.split(",")], default=list(SIZES),
                   help="allreduce message sizes, e.g. 8,1K,64K,1M,4M,16M (the default)")
    p.add_argument("--warmup", type=int, default=500, help="warm-up calls below 1 MiB (default 500)")
    p.add_argument("--iters", type=int, default=5000, help="timed calls below 1 MiB, and barriers (default 5000)")
    p.add_argument("--large-warmup", type=int, default=10, help="warm-up calls from 1 MiB (default 10)")
    p.add_argument("--large-iters", type=int, default=100, help="timed calls from 1 MiB (default 100)")
    p.add_argument("--repeats", type=int, default=3, help="sweeps per backend and N; the best mean is kept (default 3)")
    p.add_argument("--runs", type=int, default=500, help="World.run round trips at N=--run-n (default 500; 0: skip)")
    p.add_argument("--run-n", type=int, default=4)
    p.add_argument("--startup-n", type=int, default=8)
    p.add_argument("--startup-repeats", type=int, default=7, help="World starts to take the median of (0: skip)")
    p.add_argument("--mpi-startup-repeats", type=int, default=3)
    p.add_argument("--big-n", type=int, default=256, help="size of the big-world test (default 256; 0: skip)")
    p.add_argument("--big-bytes", type=_bytes, default=1 << 20)
    p.add_argument("--no-mpi", action="store_true", help="measure the simulator only")
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--mpi-args", type=str.split, default=[], help="extra mpiexec arguments, one quoted string")
    p.add_argument("--mpi-timeout", type=float, default=600.0)
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--mpi-worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.mpi_worker:
        mpi_worker(json.loads(args.mpi_worker))
        return 0
    report = measure(vars(args), lambda msg: print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True))
    print_report(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    wrong = sum(r["wrong"] for r in report["results"])
    wrong += report.get("run_rate", {}).get("wrong", 0) + report.get("big_world", {}).get("wrong", 0)
    return 1 if wrong or report["errors"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
