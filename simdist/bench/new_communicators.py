"""How much does a communicator made for one transform cost, on the
simulated mpi4py against mpi4py over Open MPI?

A pencil decomposition (mpi4py-fft's ``Subcomm``, ``Pencil``) makes its
communicators (``Create_cart``, ``Sub``) per plan, moves its arrays with
``Alltoallw`` of subarray types on them, and frees them: its tests do so
thousands of times. This times three loops on every rank: ``Split`` then
``Free`` of the world; ``Split``, one ``Alltoallw`` of small subarray
blocks on the new communicator, ``Free``; and that ``Alltoallw`` alone on
the world. A figure is the best of ``rounds`` runs under Open MPI
(``mpiexec --oversubscribe -n P``) and under ``simdist run -n P`` taking
turns, each run the best of 15 loops of 300 calls (``measure``'s
``repeats`` and ``calls``), in microseconds per call (the slowest rank's).

Usage: ``python -m simdist.bench.new_communicators [--ranks 1,2,4]
[--rounds 3]`` prints a table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from simdist.bench.launchers import best_of, compared

LOOPS = ("Split, Free", "Split, Alltoallw, Free", "Alltoallw")


def _rank(repeats: int, calls: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size = comm.size
    send, recv = np.ones((8, 9 * size)), np.zeros((8 * size, 9))
    send_types = [MPI.DOUBLE.Create_subarray(send.shape, [8, 9], [0, 9 * p]).Commit() for p in range(size)]
    recv_types = [MPI.DOUBLE.Create_subarray(recv.shape, [8, 9], [8 * p, 0]).Commit() for p in range(size)]
    ones, zeros = [1] * size, [0] * size
    args = ([send, ones, zeros, send_types], [recv, ones, zeros, recv_types])

    def used(on):
        on.Alltoallw(*args)

    def made_used_freed():
        new = comm.Split(0, comm.rank)
        used(new)
        new.Free()

    loops = {LOOPS[0]: lambda: comm.Split(0, comm.rank).Free(), LOOPS[1]: made_used_freed,
             LOOPS[2]: lambda: used(comm)}
    best = dict.fromkeys(loops, float("inf"))
    for _ in range(repeats):
        for name, loop in loops.items():
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                loop()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    ok = bool(np.all(recv == 1))
    for datatype in send_types + recv_types:
        datatype.Free()
    print("COMMS " + json.dumps({"rank": comm.rank, **best, "ok": ok}), flush=True)


def measure(ranks: list[int], rounds: int, repeats: int = 15, calls: int = 300) -> list[dict]:
    """The best of ``rounds`` runs of each loop, both launchers taking turns."""
    cells = []
    for p in ranks:
        best, ok = best_of(p, ["simdist.bench.new_communicators", "--rank", str(repeats), str(calls)], "COMMS",
                           LOOPS, rounds)
        cells += compared(best, ok, "loop", LOOPS, "us", ranks=p)
    return cells


def main(argv: list[str]) -> None:
    if argv[:1] == ["--rank"]:
        _rank(int(argv[1]), int(argv[2]))
        return
    parser = argparse.ArgumentParser(prog="python -m simdist.bench.new_communicators")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(measure([int(p) for p in args.ranks.split(",")], args.rounds)))


if __name__ == "__main__":
    main(sys.argv[1:])
