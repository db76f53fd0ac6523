"""The MPI side of the sweep: the same cells with mpi4py under ``mpiexec``.

:func:`mpi_sweep` starts ``mpiexec -n N python -m simdist.bench.mpi_side
SPEC`` as simdist's MPI backend starts its jobs (:func:`run_mpiexec`). Each
rank then runs :func:`mpi_worker`: mpi4py's buffer calls (``Allreduce``,
``Bcast``, ``Allgather``, ``Reduce_scatter_block``, ``Alltoall``,
``Reduce``, ``Barrier``) on numpy arrays, into one receive buffer reused by
every call, timed and checked as :func:`simdist.bench.cells.timed` does;
rank 0 writes every rank's figures to the file the spec names, which the
parent reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from .cells import ROOT, cell_sizes, is_right, iterations, layout, make_case, record, timed

__all__ = ["mpiexec_command", "run_mpiexec", "mpi_body", "mpi_worker", "mpi_sweep"]

#: The options a rank needs, passed as JSON on its command line.
SPEC_KEYS = ("collectives", "sizes", "dtype", "warmup", "iters", "large_warmup", "large_iters")


def mpiexec_command(n: int, opts: dict) -> list[str]:
    """``mpiexec -n n`` as simdist's MPI backend starts it, and ``opts["mpi_args"]``."""
    from ..mpi._driver import launch_command

    return launch_command(opts["mpiexec"], n) + opts["mpi_args"]


def run_mpiexec(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd)`` in the environment simdist's MPI backend gives
    its jobs, with a session directory of its own, removed afterwards."""
    from ..mpi._driver import launch_environment, session_tmpdir

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
        return timed(lambda: (comm.Bcast(buf, root=ROOT), buf)[1], lambda got: is_right(got, c.want),
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
    return timed(lambda: (call(), out)[1], lambda got: is_right(got, c.want), warmup, iters, comm.Barrier,
                 (lambda: None) if out is None else (lambda: out.fill(0)))


def mpi_worker(spec: dict) -> None:
    """What each rank under ``mpiexec`` runs: every cell of ``spec``; rank 0 writes them all."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    itemsize = np.dtype(spec["dtype"]).itemsize
    mine = []
    for collective in spec["collectives"]:
        for nbytes in cell_sizes(collective, spec["sizes"], comm.Get_size(), itemsize):
            count, _ = layout(collective, comm.Get_size(), nbytes, itemsize)
            warm, iters = iterations(nbytes, spec)
            mine.append(mpi_body(comm, MPI, collective, count, spec["dtype"], warm, iters))
    every = comm.gather(mine, root=0)
    if comm.Get_rank() == 0:
        with open(spec["out"], "w") as fh:
            json.dump({"per_rank": every, "library": MPI.Get_library_version().splitlines()[0]}, fh)


def mpi_sweep(n: int, opts: dict, say) -> list[dict]:
    """Every collective and size of ``opts`` under ``mpiexec -n n``; its rows.
    RuntimeError (with mpiexec's standard error) when the job fails."""
    cmd = mpiexec_command(n, opts)
    say(f"mpi N={n} {','.join(opts['collectives'])}: {' '.join(cmd)}")
    with tempfile.TemporaryDirectory(prefix="simdist-bench-") as tmp:
        spec = {k: opts[k] for k in SPEC_KEYS}
        spec["out"] = os.path.join(tmp, "out.json")
        cmd += [sys.executable, "-m", __name__, json.dumps(spec)]
        proc = run_mpiexec(cmd, capture_output=True, text=True, timeout=opts["mpi_timeout"])
        if proc.returncode != 0 or not os.path.exists(spec["out"]):
            raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(spec["out"]) as fh:
            every = json.load(fh)["per_rank"]
    itemsize = np.dtype(opts["dtype"]).itemsize
    cells = [(c, b) for c in opts["collectives"] for b in cell_sizes(c, opts["sizes"], n, itemsize)]
    return [record("mpi", c, n, b, opts["dtype"], [rank[i] for rank in every]) for i, (c, b) in enumerate(cells)]


if __name__ == "__main__":
    mpi_worker(json.loads(sys.argv[1]))
