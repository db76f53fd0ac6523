"""The memory of a window (``MPI.Win``): one shared segment per window.

Every window, whatever its flavor, has one anonymous ``memfd`` segment that
every rank of its communicator maps: a control area (the lock and PSCW
counters of ``_winsync``), then the window memory of each rank, rank after
rank with no gap (so that ``Allocate_shared`` memory is contiguous, as MPI
gives it by default). The rank-0 process creates it; the others open it
through ``/proc/<pid>/fd/<fd>`` (same user, same machine) and map it. A
memfd has no name in /dev/shm: it is gone once the last process unmaps and
closes it (``Win.Free``, the end of the run, or the process's death), so
nothing can leak.

Atomicity across processes uses ``fcntl`` record locks on the segment's
file, on bytes past its end (a lock there holds no memory): one byte for
the control area's mutex, one per target rank for the elementwise
atomicity of accumulates, and one per target rank for the table of the
regions it attached to a dynamic window (``_windynamic``). ``fcntl``
locks are released by the kernel when a process dies, so a killed rank never leaves one held.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os

import numpy as np

#: int64 words of control state per (target, origin) pair (see ``_winsync``).
CONTROL_WORDS = 4  # POSTED, COMPLETED, WAITING, EXPOSED


class Segment:
    """The shared memory of one window on one rank (see the module docstring)."""

    def __init__(self, sc, sizes: list[int], initial: np.ndarray | None = None):
        """Collective over ``sc`` (the window communicator's SimComm):
        ``sizes`` are the window bytes of every rank, in rank order;
        ``initial``, this rank's first contents (before any rank can reach them)."""
        n = len(sizes)
        self.rank, self.size = sc.rank, n
        control = CONTROL_WORDS * 8 * n * n + 8 * n
        self._data_start = -(-control // 64) * 64
        self.offsets = [self._data_start + sum(sizes[:r]) for r in range(n)]
        self.sizes = list(sizes)
        self.length = max(self._data_start + sum(sizes), 1)
        fd = -1
        if self.rank == 0:
            fd = os.memfd_create("mpi4py-win", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.length)
        where = sc.broadcast(np.array([os.getpid(), fd], np.int64), root=0)
        if self.rank != 0:
            fd = os.open(f"/proc/{int(where[0])}/fd/{int(where[1])}", os.O_RDWR | os.O_CLOEXEC)
        self._fd = fd
        self._map = mmap.mmap(fd, self.length)
        self._bytes = np.frombuffer(self._map, np.uint8)
        words = np.frombuffer(self._map, np.int64, count=CONTROL_WORDS * n * n + n)
        self.control = words[:CONTROL_WORDS * n * n].reshape(n, n, CONTROL_WORDS)
        self.lock_state = words[CONTROL_WORDS * n * n:]  # per target: -1 exclusive, k > 0 shared by k
        if initial is not None and initial.size:
            self.memory(self.rank)[...] = initial
        sc.barrier()  # every rank has opened the file (and set its contents) before any other uses it

    def memory(self, rank: int) -> np.ndarray:
        """The window bytes of ``rank`` (a uint8 view of the segment)."""
        start = self.offsets[rank]
        return self._bytes[start:start + self.sizes[rank]]

    def address(self, rank: int) -> int:
        return self._bytes.ctypes.data + self.offsets[rank]

    @contextlib.contextmanager
    def _locked(self, byte: int):
        start = self.length + byte
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, start)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, start)

    def mutex(self):
        """The control area's mutex (held for a few word updates only)."""
        return self._locked(0)

    def atomic(self, target: int):
        """Elementwise atomicity of the accumulates to ``target``'s memory."""
        return self._locked(1 + target)

    def table_lock(self, target: int):
        """The lock of ``target``'s table of attached regions (dynamic windows)."""
        return self._locked(1 + self.size + target)

    def close(self) -> None:
        """Unmap and close (a view the program still holds keeps its pages
        until it goes)."""
        if self._fd < 0:
            return
        self._bytes = self.control = self.lock_state = None
        try:
            self._map.close()
        except BufferError:  # the program holds a view (tomemory, Shared_query): the pages go with it
            pass
        os.close(self._fd)
        self._fd = -1


class PrivateCopy:
    """The program's buffer as the private copy of a separate-model window's
    memory (``Win.Create``, a region of ``Win.Create_dynamic``), with what it
    held at the last reconciliation: only the bytes the program stored since
    go public, so an origin's Put to other bytes is not overwritten."""

    def __init__(self, private: np.ndarray):
        self.private = private
        self.snapshot = np.array(private, copy=True)

    def to_public(self, public: np.ndarray) -> None:
        changed = self.private != self.snapshot
        if changed.any():
            public[changed] = self.private[changed]
            self.snapshot[changed] = self.private[changed]

    def to_private(self, public: np.ndarray) -> None:
        self.private[...] = public
        self.snapshot[...] = self.private
