"""A simulator rank's process: runs the functions its driver sends, with a
:class:`SimComm` over the world's arena."""

from __future__ import annotations

import ctypes
import os
import pickle
import sys

from .._stdin import take_stdin
from .._worker import Channel, become_worker, execute, forward_logs, watch_lifeline
from . import _requests
from ._arena import Arena, _libc
from ._layout import FAILED, RETURNED, S_STATE, USER, Layout
from ._comm import SimComm, close_run
from ._mpi4py_import import redirect as redirect_mpi4py
from ._p2p import Mailboxes


def _pin(rank: int, size: int) -> None:
    """Give each rank a CPU of its own when there are enough (as mpiexec
    binds ranks to cores): two spinning ranks that the scheduler put on one
    CPU would otherwise take turns for whole time slices.

    When the ranks are a multiple of the CPUs, deal them out round-robin:
    every CPU then takes the same number of turns per call. Left to the
    scheduler, 8 ranks on 2 CPUs sat 5 and 3 in some runs, and a barrier
    took 21-24 us instead of 13-16 (docs/performance.md)."""
    cpus = sorted(os.sched_getaffinity(0))
    if size <= len(cpus) or size % len(cpus) == 0:
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


#: OpenBLAS's thread-count setters, as numpy's and scipy's builds name them.
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                 "openblas_set_num_threads64_", "openblas_set_num_threads")


def one_torch_thread() -> None:
    """torch's intra-op pool gets one thread, when the rank was forked from a
    process that had imported torch: the pool (GNU OpenMP's) of a process
    that already ran a parallel op does not survive a fork, and the child's
    first op waits for its threads for ever (measured: a 256x256 product in
    a rank forked after one in its driver never returned). With one thread
    an op runs on the calling thread alone, as in a pinned rank it should."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(1)


def one_blas_thread() -> bool:
    """Limit every OpenBLAS loaded in this process to one thread; True if one was found.

    The thread count is stored directly where OpenBLAS exports it
    (``blas_cpu_number``): its setter, called after a fork, first re-creates
    the thread pool, whose idle thread then spins for about 0.1 s on this
    rank's CPU (measured: 4 ms stalls of a 2-rank barrier loop for the
    first 130 ms of a world). With one thread OpenBLAS never starts the pool.
    """
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return False
    found = False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        try:
            ctypes.c_int.in_dll(lib, "blas_cpu_number").value = 1
            found = True
            continue
        except ValueError:  # not exported by this build: use the setter
            pass
        for name in _BLAS_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(ctypes.c_int(1))
                found = True
                break
    return found


#: glibc's mallopt parameters.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Let glibc reuse freed memory for new arrays until the run ends; True if it can.

    A collective returns a new array on every call. glibc serves a large one
    with a fresh ``mmap``, whose pages are faulted in and zeroed as they are
    first written, and returns it to the system when it is freed: a 64 MiB
    allreduce at N=2 took 34.9 ms that way and 19.6 ms from the heap on 2
    CPUs (docs/performance.md, "Earlier findings"). So allocations come from the
    heap (no mmap) and freed memory stays there; ``release_freed_memory``
    gives it back after each run.
    """
    mallopt = getattr(_libc, "mallopt", None)
    if mallopt is None:  # not glibc
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def release_freed_memory() -> None:
    """Return the heap's free memory to the system (between runs)."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def main(rank: int, layout_args: dict, shared_fd, conn, lifeline, order: str = "fold", stdin=None) -> None:
    """Entry point of a worker process; ``stdin``, rank 0's, is the driver's standard input."""
    become_worker((shared_fd.fd, lifeline.fd, conn.fileno()))
    take_stdin(None if stdin is None else stdin.fd)  # the others keep multiprocessing's /dev/null
    watch_lifeline(lifeline)
    redirect_mpi4py()  # a simulated rank must never start a real MPI world of one
    channel = Channel(conn)
    _requests.pipe = channel, conn
    arena = Arena(Layout(**layout_args), shared_fd.fd, rank)
    _pin(rank, arena.size)
    # A rank's BLAS gets one thread: a pinned rank's other threads could only
    # share its CPU, and unpinned ranks already outnumber the CPUs (a 64x1024
    # by 1024x1024 float32 product took 32 ms with numpy's default threads in
    # a pinned rank, 1.3 ms with one; at N=4 on 2 CPUs, 8 to 28 ms and 1.6 to 3.7 ms).
    one_blas_thread()
    one_torch_thread()
    keep_freed_memory()
    forward_logs(channel)
    channel.send(("ready", os.getpid()))
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except EOFError:
            break
        if msg[0] == "exit":
            break
        channel.send(("done", msg[1], *_run(arena, rank, order, *msg[2:])))
        release_freed_memory()
    arena.close()


def _run(arena: Arena, rank: int, order: str, payload: bytes, sys_path, cwd, log_levels, members: list[int]):
    """Run one function on this rank, whose world holds the slots ``members``;
    return (outcome, data)."""
    q = arena.q
    state = arena.layout.status_word(rank, S_STATE)
    arena.start_run()

    def set_state(value):
        q[state] = value
        if value != USER:  # peers waiting on us re-check and see it
            arena.wake_sleepers()

    try:
        return execute(
            rank,
            lambda: SimComm(arena, Mailboxes(arena), members, 0, order=order),
            payload, sys_path, cwd, log_levels,
            started=lambda: set_state(USER),
            failed=lambda: set_state(FAILED),
            returned=lambda: set_state(RETURNED),
        )
    finally:
        close_run(arena)  # a communicator kept for a later run is refused there
