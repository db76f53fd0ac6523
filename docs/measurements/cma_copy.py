"""Is a single-copy read of another process's memory faster than a copy
through shared memory, on this machine?

Two processes, each pinned to its own CPU. The other process rewrites a
private numpy array and a region of shared memory with a new value before
each measured copy, so both sources sit in the other CPU's cache, as a
rank's buffers do in a collective. This process then copies the same number
of bytes either way:

- ``process_vm_readv`` (Linux cross-memory attach, what Open MPI's
  ``smsc/cma`` uses) from the other process's array into a local array;
- ``numpy.copyto`` from the shared region into the same local array (what
  the simulator does with a peer's slot).

Prints the median time of each, in microseconds, as JSON and as a line.
Usage: ``python docs/measurements/cma_copy.py [KiB] [repeats]`` (Linux,
2 CPUs or more).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import statistics
import sys
import time

import numpy as np


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def main() -> None:
    nbytes = int(sys.argv[1]) * 1024 if len(sys.argv) > 1 else 512 * 1024
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    libc = ctypes.CDLL(None, use_errno=True)
    readv = libc.process_vm_readv
    readv.restype = ctypes.c_ssize_t
    readv.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                      ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]
    shared = mmap.mmap(-1, nbytes + 4096)
    control = np.ndarray((8,), np.int64, shared, nbytes)  # address, ready, stop, request, served
    source = np.ndarray((nbytes // 4,), np.float32, shared, 0)
    pid = os.fork()
    if pid == 0:  # the other process: keeps both sources fresh in its cache
        os.sched_setaffinity(0, {1})
        private = np.zeros(nbytes // 4, np.float32)
        control[0] = private.ctypes.data
        control[1] = 1
        served = 0
        while control[2] == 0:
            if control[3] != served:
                served = int(control[3])
                private[...] = served
                source[...] = served
                control[4] = served
        os._exit(0)
    try:
        os.sched_setaffinity(0, {0})
        while control[1] == 0:
            pass
        dest = np.empty(nbytes // 4, np.float32)
        local, remote = _Iovec(dest.ctypes.data, nbytes), _Iovec(int(control[0]), nbytes)
        times = {"process_vm_readv": [], "numpy.copyto from shared memory": []}
        for i in range(1, repeats + 1):
            for name in times:
                control[3] = request = 2 * i + (name != "process_vm_readv")
                while control[4] != request:
                    pass
                start = time.perf_counter()
                if name == "process_vm_readv":
                    if readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) != nbytes:
                        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
                else:
                    np.copyto(dest, source)
                times[name].append(time.perf_counter() - start)
                assert dest[0] == request and dest[-1] == request
    finally:
        control[2] = 1
        os.waitpid(pid, 0)
    medians = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    print(json.dumps({"bytes": nbytes, "repeats": repeats, "median_us": medians}))
    print(f"{nbytes >> 10} KiB: " + ", ".join(f"{name} {us:.1f} us" for name, us in medians.items()))


if __name__ == "__main__":
    main()
