"""Would an alltoall that reads the peers' buffers directly (as Open MPI can) beat the copy through shared memory?

N processes each hold a private send buffer of S bytes (N blocks) and
build a result of N blocks, block j being block ``me`` of process j:

- **shm**, the simulator's scheme: copy the send buffer into this
  process's region of shared memory, wait for everyone, copy block ``me``
  of every region into the result (one strided copy), wait again (so a
  region is not rewritten while it is read);
- **cma**: wait until every buffer is ready, read block ``me`` of every
  peer's private buffer straight into the result with ``process_vm_readv``
  (Linux cross-memory attach, one call per peer), wait again (so a buffer
  does not change while it is read).

Waits spin on shared words and yield the CPU when the processes outnumber
the CPUs; processes are pinned when there are enough CPUs. Prints the mean
time per alltoall over the processes, in microseconds, for each method, as
JSON lines and a table.

Usage: ``python -m simdist.bench.direct_read [N,N,...] [KiB,KiB,...] [repeats]``
(default ``2,8,16 256,1024,4096 20``; Linux, where process_vm_readv is
allowed between the processes: same user, and root or a ptrace scope that
permits it).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import sys
import time
import traceback

import numpy as np

from .report import columns

LINE = 8  # int64 words per cache line


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = _libc.process_vm_readv
_readv.restype = ctypes.c_ssize_t
_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                   ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]


def _rank(me, n, nbytes, repeats, words, regions, oversubscribed):
    if not oversubscribed:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[me]})
    block = nbytes // n
    x = np.full(nbytes // 4, me, np.float32)
    out = np.empty_like(x)
    words[me * LINE + 1] = os.getpid()
    words[me * LINE + 2] = x.ctypes.data
    rounds = [0]
    others = [r * LINE for r in range(n) if r != me]

    def barrier():
        rounds[0] += 1
        words[me * LINE] = rounds[0]
        for w in others:
            while words[w] < rounds[0]:
                if oversubscribed:
                    os.sched_yield()

    mine = np.ndarray((nbytes // 4,), np.float32, regions, me * nbytes)
    every = np.ndarray((n, n, block // 4), np.float32, regions, 0)
    barrier()  # every pid and address is published
    local = [_Iovec(out.ctypes.data + j * block, block) for j in range(n)]
    remote = [_Iovec(int(words[j * LINE + 2]) + me * block, block) for j in range(n)]
    pids = [int(words[j * LINE + 1]) for j in range(n)]

    def shm():
        np.copyto(mine, x)
        barrier()
        np.copyto(out.reshape(n, -1), every[:, me])
        barrier()

    def cma():
        barrier()
        for j in range(n):
            if j == me:
                out[j * block // 4:(j + 1) * block // 4] = x[me * block // 4:(me + 1) * block // 4]
            elif _readv(pids[j], ctypes.byref(local[j]), 1, ctypes.byref(remote[j]), 1, 0) != block:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        barrier()

    results = {}
    for name, step in (("shm", shm), ("cma", cma), ("shm", shm), ("cma", cma)):
        step()
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        results.setdefault(name, []).append((time.perf_counter() - start) / repeats * 1e6)
        assert out.reshape(n, -1)[:, 0].tolist() == list(range(n)), name
    return {name: min(times) for name, times in results.items()}


def measure(n: int, nbytes: int, repeats: int) -> dict[str, float]:
    page = mmap.mmap(-1, 4096 * 4)
    words = memoryview(page).cast("q")
    regions = mmap.mmap(-1, n * nbytes)
    regions.write(bytes(n * nbytes))  # touch every page up front
    oversubscribed = n > len(os.sched_getaffinity(0))
    results = np.ndarray((n, 2), np.float64, mmap.mmap(-1, 4096), 0)
    pids = []
    for me in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                got = _rank(me, n, nbytes, repeats, words, regions, oversubscribed)
                results[me] = (got["shm"], got["cma"])
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
    if any(os.waitpid(pid, 0)[1] for pid in pids):
        raise SystemExit("a process failed (is process_vm_readv allowed here?)")
    return {"shm": float(results[:, 0].mean()), "cma": float(results[:, 1].mean())}


def main(argv: list[str]) -> None:
    sizes = [int(s) for s in argv[0].split(",")] if argv else [2, 8, 16]
    kib = [int(s) for s in argv[1].split(",")] if len(argv) > 1 else [256, 1024, 4096]
    repeats = int(argv[2]) if len(argv) > 2 else 20
    lines = []
    for n in sizes:
        for k in kib:
            got = measure(n, k * 1024, repeats)
            row = {"n": n, "KiB": k, "shm_us": round(got["shm"], 1), "cma_us": round(got["cma"], 1),
                   "cma_over_shm": round(got["cma"] / got["shm"], 2)}
            lines.append(tuple(str(v) for v in row.values()))
            print(json.dumps(row), flush=True)
    print(columns(("N", "KiB", "shm us", "cma us", "cma/shm"), lines, left=(False,) * 5))


if __name__ == "__main__":
    main(sys.argv[1:])
