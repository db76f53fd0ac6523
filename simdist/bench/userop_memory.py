"""How much memory does a reduction with a user-defined op take per rank?

Each rank of a 2-rank run allocates a float64 buffer of the given size,
fills it, and calls ``Allreduce`` once with a user op (``MPI.Op.Create``
of a numpy sum over the operands' ``MPI.buffer`` objects), in place
(``MPI.IN_PLACE``) or into a second buffer (and an in-place
``Iallreduce``, waited for at once, and an in-place ``Allreduce`` of the
buffer as one element of a struct of a vector and a remainder, as a
library sends a count beyond 2**31 - 1); it reports its peak resident
memory (``VmHWM``) before and after the call, the call's time, and checks
the result. The
program runs under Open MPI (``mpiexec --oversubscribe -n 2 python -m
simdist.bench.userop_memory --rank ...``) and under the simulated mpi4py
(``simdist run -n 2 -m simdist.bench.userop_memory --rank ...``), one
process per measurement, since the peak of a process never goes down.

Usage: ``python -m simdist.bench.userop_memory [MiB ...]`` (default
``256``) prints one line per size, mode and launcher, and the JSON.
"""

from __future__ import annotations

import json
import sys
import time

from simdist.bench.launchers import LAUNCHERS, run_under

MODES = ("in_place", "out_of_place", "Iallreduce_in_place", "one_element_in_place")
#: ``one_element_in_place``'s block: the buffer is one element of a struct of a vector of blocks
#: of this many float64 and the remainder, as a library sends more than 2**31 - 1 elements
#: (with a smaller limit, so that the sizes here need the same type).
BLOCK = (1 << 24) - 1


def _vm_hwm_mib() -> float:
    """This process's peak resident memory (``VmHWM``), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _rank(mib: int, mode: str) -> None:
    import numpy as np
    from mpi4py import MPI

    def add(inbuf, inoutbuf, datatype):
        b = np.frombuffer(inoutbuf, np.float64)
        np.add(np.frombuffer(inbuf, np.float64), b, out=b)

    comm = MPI.COMM_WORLD
    op = MPI.Op.Create(add, commute=True)
    x = np.full((mib << 20) // 8, comm.rank + 1.0)
    out = np.zeros_like(x) if mode == "out_of_place" else x
    before = _vm_hwm_mib()
    comm.Barrier()
    start = time.perf_counter()
    if mode == "Iallreduce_in_place":
        comm.Iallreduce(MPI.IN_PLACE, out, op).Wait()
    elif mode == "one_element_in_place":
        blocks, rest = divmod(x.size, BLOCK)
        vector, tail = MPI.DOUBLE.Create_vector(blocks, BLOCK, BLOCK), MPI.DOUBLE.Create_contiguous(rest)
        element = MPI.Datatype.Create_struct([1, 1], [0, blocks * BLOCK * 8], [vector, tail]).Commit()
        comm.Allreduce(MPI.IN_PLACE, [x, 1, element], op)
        for datatype in (element, vector, tail):
            datatype.Free()
    else:
        comm.Allreduce(MPI.IN_PLACE if mode == "in_place" else x, out, op)
    seconds = time.perf_counter() - start
    after = _vm_hwm_mib()
    expected = comm.size * (comm.size + 1) / 2
    ok = bool(out[0] == expected and out[-1] == expected and (out == expected).all())
    op.Free()
    print("USEROP " + json.dumps({"rank": comm.rank, "mib": mib, "mode": mode, "before_mib": round(before, 1),
                                  "peak_mib": round(after, 1), "seconds": round(seconds, 3), "ok": ok}), flush=True)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--rank"]:
        _rank(int(argv[1]), argv[2])
        return
    results = []
    for mib in [int(a) for a in argv] or [256]:
        for mode in MODES:
            for launcher in LAUNCHERS:
                rows = run_under(launcher, 2, ["simdist.bench.userop_memory", "--rank", str(mib), mode], "USEROP")
                peak = max(row["peak_mib"] for row in rows)
                print(f"{mib} MiB {mode:19} {launcher:11}: peak {peak:7.1f} MiB per rank "
                      f"(before the call {max(row['before_mib'] for row in rows):.1f}), "
                      f"{max(row['seconds'] for row in rows):.2f} s, "
                      f"result {'ok' if all(row['ok'] for row in rows) else 'WRONG'}", flush=True)
                results.append({"launcher": launcher, "ranks": rows})
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
