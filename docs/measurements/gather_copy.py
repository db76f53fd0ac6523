"""Does copying out of the shared arena cost more than copying private memory?

A large allgather on the simulator copies each rank's part into its slot,
then every member's part out of the slots into the result: one strided
copy of N parts (``SimComm._stack_all``). This times that copy out in one
process, with nothing else running, from two kinds of source holding the
same N parts of the given size:

- ``arena``: a shared ``memfd`` mapping with the parts 8 MiB apart, as the
  arena's slots are (its pages are 4 KiB: this machine's shared memory has
  no transparent huge pages);
- ``private``: one private numpy array of the same shape (numpy asks for
  transparent huge pages for arrays of 4 MiB and more).

The destination is one private array, reused, as a rank's freed result is
reused by its next. It prints the median over rounds of each source's
rate (bytes copied per second) as JSON and as a line.

Usage: ``python docs/measurements/gather_copy.py [N] [MiB per part] [rounds]``
(default ``8 2 7``).
"""

from __future__ import annotations

import json
import mmap
import os
import statistics
import sys
import time

import numpy as np

COPIES = 10  # copies timed per round
SLOT = 8 << 20


def _rate(dst: np.ndarray, src: np.ndarray) -> float:
    np.copyto(dst, src)  # fault in, warm up
    start = time.perf_counter()
    for _ in range(COPIES):
        np.copyto(dst, src)
    return dst.nbytes * COPIES / (time.perf_counter() - start) / 1e9


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    mib = float(sys.argv[2]) if len(sys.argv) > 2 else 2
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    count = int(mib * (1 << 20)) // 4
    fd = os.memfd_create("gather-copy", os.MFD_CLOEXEC)
    os.ftruncate(fd, n * SLOT)
    mm = mmap.mmap(fd, n * SLOT)
    arena = np.ndarray((n, count), np.float32, mm, 0, (SLOT, 4))
    arena[...] = np.arange(n, dtype=np.float32)[:, None]
    private = arena.copy()
    dst = np.empty_like(private)
    rates: dict[str, list[float]] = {"arena": [], "private": []}
    for _ in range(rounds):
        for name, src in (("arena", arena), ("private", private)):
            rates[name].append(_rate(dst, src))
    assert np.array_equal(dst, private)
    report = {"n": n, "part_bytes": count * 4, "rounds": rounds,
              "GBps": {k: round(statistics.median(v), 2) for k, v in rates.items()}}
    print(json.dumps(report))
    print(f"{n} parts of {mib} MiB: " + ", ".join(f"{k} {v} GB/s" for k, v in report["GBps"].items()))
    del arena, dst
    mm.close()
    os.close(fd)


if __name__ == "__main__":
    main()
