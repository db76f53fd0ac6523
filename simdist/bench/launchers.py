"""One program on N ranks under Open MPI's ``mpiexec`` and under ``simdist
run``, for the experiments that compare the simulated mpi4py with mpi4py
over Open MPI (``userop_memory``, ``transposes``): each rank prints one
line ``TAG {json}``, and the launcher's rows come back sorted by rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

LAUNCHERS = ("Open MPI", "simdist run")


def run_under(launcher: str, n: int, module_args: list[str], tag: str, timeout: float = 1800) -> list[dict]:
    """The ``tag`` rows of ``python -m MODULE ARGS`` on ``n`` ranks under ``launcher``."""
    program = ["-m", *module_args]
    if launcher == "Open MPI":
        cmd = ["mpiexec", "--oversubscribe", "-n", str(n), sys.executable, *program]
    else:
        cmd = [sys.executable, "-m", "simdist", "run", "-n", str(n), *program]
    # PMIx's shared-memory store would leave a file in /dev/shm behind each Open MPI run
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PMIX_MCA_gds="hash")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    prefix = tag + " "
    rows = [json.loads(line[len(prefix):]) for line in done.stdout.splitlines() if line.startswith(prefix)]
    if len(rows) != n:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return sorted(rows, key=lambda row: row["rank"])


def best_of(n: int, module_args: list[str], tag: str, names, rounds: int) -> tuple[dict, bool]:
    """Each launcher's least figure of every one of ``names`` over ``rounds``
    runs of the program on ``n`` ranks, the launchers taking turns (a run's
    figure: its slowest rank's); and whether every rank of every run said ``ok``."""
    best = {launcher: dict.fromkeys(names, float("inf")) for launcher in LAUNCHERS}
    ok = True
    for _ in range(rounds):
        for launcher in LAUNCHERS:
            rows = run_under(launcher, n, module_args, tag)
            ok = ok and all(row["ok"] for row in rows)
            for name in names:
                best[launcher][name] = min(best[launcher][name], max(row[name] for row in rows))
    return best, ok


def compared(best: dict, ok: bool, key: str, names, unit: str, **label) -> list[dict]:
    """A row per one of ``names`` (under ``key``) of ``best_of``'s figures,
    with ``label`` (ranks, size): each launcher's figure in ``unit`` ("ms"
    or "us"), their ratio and ``ok``; each row printed as it comes."""
    scale, digits = {"ms": (1e3, 4), "us": (1e6, 1)}[unit]
    where = " ".join(f"{'P' if k == 'ranks' else k.upper()}={v}" for k, v in label.items())
    rows = []
    for name in names:
        mpi, sim = best["Open MPI"][name], best["simdist run"][name]
        rows.append({key: name, **label, f"open_mpi_{unit}": round(mpi * scale, digits),
                     f"simdist_{unit}": round(sim * scale, digits), "ratio": round(sim / mpi, 2), "ok": ok})
        print(f"{name:24} {where}: Open MPI {mpi * scale:8.3f} {unit}, simdist run {sim * scale:8.3f} {unit}, "
              f"simdist/Open MPI {sim / mpi:5.2f}{'' if ok else '  WRONG RESULT'}", flush=True)
    return rows
