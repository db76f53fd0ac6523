"""One cell of the sweep (collective, N, size): sizes, bandwidths, exact data, the timed loop.

Everything here is pure and shared by both sides of ``simdist bench``: the
simulator's ranks (:mod:`simdist.bench.sweep`) and mpi4py's under
``mpiexec`` (:mod:`simdist.bench.mpi_side`).

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

How one cell is measured, OSU-style: warm-up calls, a barrier, a timed
loop, a barrier (:func:`iterations` gives the counts). Each rank reports
its mean time per call; :func:`record` keeps the mean over ranks
(``time_us``, the figure the bandwidths use, as nccl-tests averages over
ranks) and the minimum and maximum. The timed loop drops each result
before the next call, so a rank holds one result at a time, as the MPI side
holds its one receive buffer; the simulator's next result then reuses that
memory, as ``g = comm.allreduce(g)`` in a training loop does.

Checking: every input is a small integer, so every correct result is exact
in any summation order and is compared for equality. Every warm-up result
and the last timed result are checked on every rank (the timed loop itself
is not slowed by checks); receive buffers are zeroed before the timed loop,
so the last result cannot be left over from the warm-up. ``wrong`` counts
the mismatches over all ranks.
"""

from __future__ import annotations

import re
import statistics
import time
from typing import Callable, NamedTuple

import numpy as np

from .._communicator import BLOCKED

__all__ = [
    "COLLECTIVES", "DEFAULT_COLLECTIVES", "DTYPES", "ROOT", "LARGE", "parse_bytes", "sizes", "human_bytes",
    "iterations", "bus_factor", "layout", "cell_sizes", "Case", "make_case", "is_right", "timed", "record",
]

#: What the bench times: the contract's collectives that nccl-tests times too
#: (gather and scatter have no nccl-tests figure), reduce last but barrier.
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "reduce", "barrier")
DEFAULT_COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier")
#: The element types the bench offers (every one has an MPI type and exact small integers).
DTYPES = ("float32", "float64", "int32", "int64")
#: S is n blocks of each rank's part: the gathered result, or the input of one block per rank.
N_BLOCKS = ("allgather", *(c for c in BLOCKED if c in COLLECTIVES))
ROOT = 0
LARGE = 1 << 20  # messages of at least this many bytes use the "large" iteration counts


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
    if collective in N_BLOCKS:
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"collective={collective!r} has no bus bandwidth (choose from {', '.join(COLLECTIVES[:-1])})")


def layout(collective: str, n: int, nbytes: int, itemsize: int) -> tuple[int, int]:
    """``(count, bytes)``: elements of each rank's part, and S actually moved."""
    if collective == "barrier":
        return 0, 0
    if collective in N_BLOCKS:
        count = max(1, nbytes // (n * itemsize))
        return count, count * n * itemsize
    count = max(1, nbytes // itemsize)
    return count, count * itemsize


def cell_sizes(collective: str, requested: list[int], n: int, itemsize: int) -> list[int]:
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


def is_right(got, want) -> bool:
    """``got`` is exactly ``want`` (None where no result is due)."""
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
