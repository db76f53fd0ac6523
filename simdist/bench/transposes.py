"""How fast are the transposes of a parallel FFT, with derived datatypes,
on the simulated mpi4py against mpi4py over Open MPI?

A distributed FFT (mpi4py-fft's slab and pencil decompositions) moves its
array from one axis split across the ranks to another with one
``Alltoallw`` whose blocks are subarray datatypes (``Create_subarray``):
rank r sends block j of its slab, a cut of it along the other axis, to
rank j. This times that transpose of an ``N x N x N`` complex128 array
(the input split on axis 0, the output on axis 1); the same transpose
with its subarray types made, committed and freed around every call, as
an FFT library that makes them per plan does (mpi4py-fft's tests make a
plan for each of their transposes); and an ``Alltoallv`` of the columns
of an ``N x N`` float64 matrix with a vector datatype (``Create_vector``
resized to one element, a column block per rank); each rank checks what
it got. A figure is the best of ``rounds`` runs,
under Open MPI (``mpiexec --oversubscribe -n P``) and under ``simdist
run -n P`` taking turns, each run the median of ``reps`` calls after one
untimed call, each call timed alone after a barrier; and, for the calls
on types made once (``... in a loop``), the mean of ``loop`` calls in a
row between two barriers, as ``simdist bench`` times its cells (the OSU
micro-benchmarks' way): what a program that transposes again and again
sees, where the first figure also holds each rank's way out of the
barrier.

Usage: ``python -m simdist.bench.transposes [N ...] [--ranks 2,4]
[--rounds 3] [--reps 10] [--loop 200]`` (default N 64 and 128) prints a
table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from simdist.bench.launchers import best_of, compared

CALLS = ("Alltoallw subarrays", "Alltoallw, new types", "Alltoallv vector", "Alltoallw subarrays in a loop",
         "Alltoallv vector in a loop")


def _subarrays(MPI, shape, axis: int, size: int) -> list:
    types = []
    for p in range(size):
        sub, start = list(shape), [0] * len(shape)
        sub[axis] = shape[axis] // size
        start[axis] = p * sub[axis]
        types.append(MPI.DOUBLE_COMPLEX.Create_subarray(shape, sub, start).Commit())
    return types


def _timed(comm, call, reps: int) -> float:
    call()
    times = []
    for _ in range(reps):
        comm.Barrier()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _looped(comm, call, calls: int) -> float:
    call()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    comm.Barrier()
    return (time.perf_counter() - start) / calls


def _rank(n: int, reps: int, loop: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size, rank = comm.size, comm.rank
    if n % size:
        raise SystemExit(f"N={n} is not a multiple of {size} ranks")
    m = n // size
    # Alltoallw of subarrays: (m, n, n) split on axis 0 -> (n, m, n) split on axis 1
    slab = (np.arange(m * n * n, dtype=np.complex128) + 1j * rank).reshape(m, n, n)
    pencil = np.empty((n, m, n), np.complex128)
    send_types, recv_types = _subarrays(MPI, slab.shape, 1, size), _subarrays(MPI, pencil.shape, 0, size)
    ones, zeros = [1] * size, [0] * size

    def transpose():
        comm.Alltoallw([slab, ones, zeros, send_types], [pencil, ones, zeros, recv_types])

    w, w_loop = _timed(comm, transpose, reps), _looped(comm, transpose, loop)
    whole = np.arange(m * n * n, dtype=np.complex128).reshape(m, n, n)

    def landed() -> bool:
        return all(np.array_equal(pencil[p * m:(p + 1) * m], whole[:, rank * m:(rank + 1) * m] + 1j * p)
                   for p in range(size))

    ok = landed()
    for datatype in send_types + recv_types:
        datatype.Free()

    def planned():
        sends, recvs = _subarrays(MPI, slab.shape, 1, size), _subarrays(MPI, pencil.shape, 0, size)
        comm.Alltoallw([slab, ones, zeros, sends], [pencil, ones, zeros, recvs])
        for datatype in sends + recvs:
            datatype.Free()

    pencil[...] = 0
    planned_w = _timed(comm, planned, reps)
    ok = ok and landed()
    # Alltoallv of column blocks: (m, n) rows -> (n, m) transposed block per rank, by a vector type
    rows = np.arange(m * n, dtype=np.float64).reshape(m, n) + rank * m * n
    got = np.empty((n, m))
    column = MPI.DOUBLE.Create_vector(m, 1, n).Create_resized(0, 8).Commit()
    send = [rows, ([m] * size, [p * m for p in range(size)]), column]
    recv = [got, ([m * m] * size, [p * m * m for p in range(size)]), MPI.DOUBLE]

    def vector():
        comm.Alltoallv(send, recv)

    v, v_loop = _timed(comm, vector, reps), _looped(comm, vector, loop)
    ok = ok and all(np.array_equal(got[p * m:(p + 1) * m].reshape(m, m),
                                   (np.arange(m * n, dtype=np.float64).reshape(m, n) + p * m * n)
                                   [:, rank * m:(rank + 1) * m].T) for p in range(size))
    column.Free()
    print("TRANSPOSE " + json.dumps({"rank": rank, "n": n, "ranks": size, CALLS[0]: w, CALLS[1]: planned_w,
                                     CALLS[2]: v, CALLS[3]: w_loop, CALLS[4]: v_loop, "ok": ok}), flush=True)


def measure(sizes: list[int], ranks: list[int], rounds: int, reps: int, loop: int) -> list[dict]:
    """The best of ``rounds`` runs of each cell, both launchers taking turns."""
    cells = []
    for p in ranks:
        for n in sizes:
            best, ok = best_of(p, ["simdist.bench.transposes", "--rank", str(n), str(reps), str(loop)], "TRANSPOSE", CALLS,
                               rounds)
            cells += compared(best, ok, "call", CALLS, "ms", ranks=p, n=n)
    return cells


def main(argv: list[str]) -> None:
    if argv[:1] == ["--rank"]:
        _rank(int(argv[1]), int(argv[2]), int(argv[3]))
        return
    parser = argparse.ArgumentParser(prog="python -m simdist.bench.transposes")
    parser.add_argument("sizes", nargs="*", type=int, default=[64, 128])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--loop", type=int, default=200)
    args = parser.parse_args(argv)
    cells = measure(args.sizes, [int(p) for p in args.ranks.split(",")], args.rounds, args.reps, args.loop)
    print(json.dumps(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
