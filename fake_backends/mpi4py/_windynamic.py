"""The memory of a dynamic window (``Win.Create_dynamic``, ``Attach``, ``Detach``).

A dynamic window has the usual window segment (``_winmemory``) with no
window bytes, for its control area (locks, PSCW), and, per rank, one
growable anonymous ``memfd``: the public copies of the regions the rank
attached. The file starts with a table: a generation word (bumped by every
Attach and Detach), the number of regions, then one (address, bytes,
offset in the file) entry per region. The program's buffer stays the
private copy of its region (as the buffer of ``Win.Create``: the window is
``MPI.WIN_SEPARATE``), reconciled with the public copy at the calls MPI
names; Attach makes its contents public at once.

An origin opens a target's file through ``/proc/<pid>/fd/<fd>`` on its
first access and keeps a copy of its table, which it reads again (and maps
the file again, if it grew) only when the generation word changed. The
table is read and written under a record lock of the window segment. The
target displacement of a dynamic window is an absolute address
(``MPI.Get_address``): an access must lie inside one attached region of
the target, else ``MPI.ERR_RMA_RANGE``. A file only grows while the window
lives (a detached region's bytes are reused by a later Attach), so an
origin's mapping never loses the bytes it was given.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ._errors import Exception as MPIException
from ._names import CONSTANTS
from ._winmemory import PrivateCopy

ERR_RMA_ATTACH, ERR_RMA_RANGE, ERR_UNKNOWN, ERR_PROC_FAILED = (
    CONSTANTS[k] for k in ("ERR_RMA_ATTACH", "ERR_RMA_RANGE", "ERR_UNKNOWN", "ERR_PROC_FAILED"))
MAX_REGIONS = 1024  # attached regions per rank at once
_HEADER_WORDS = 2  # generation, number of regions
_ENTRY_WORDS = 3  # address, bytes, offset
_DATA_START = -(-(_HEADER_WORDS + _ENTRY_WORDS * MAX_REGIONS) * 8 // 4096) * 4096
_ALIGN = 64  # each region's public copy starts on a 64-byte boundary
_GROWTH = 1 << 16  # the file grows by multiples of this many bytes


class _RegionFile:
    """One rank's file of attached memory as this process maps it, with its
    table as last read (a list of (address, bytes, offset), by address)."""

    def __init__(self, fd: int):
        self.fd, self.length, self.generation = fd, 0, -1
        self.entries: list[tuple[int, int, int]] = []
        self._map = self.bytes = self.words = None

    def remap(self) -> None:
        length = os.fstat(self.fd).st_size
        if length != self.length:
            self._map = mmap.mmap(self.fd, length)  # the earlier map goes with its last view
            self.bytes = np.frombuffer(self._map, np.uint8)
            self.words = np.frombuffer(self._map, np.int64, count=_HEADER_WORDS + _ENTRY_WORDS * MAX_REGIONS)
            self.length = length

    def read_table(self) -> None:
        self.remap()
        count = int(self.words[1])
        table = self.words[_HEADER_WORDS:_HEADER_WORDS + _ENTRY_WORDS * count].reshape(count, _ENTRY_WORDS)
        self.entries = sorted(tuple(int(v) for v in row) for row in table)
        self.generation = int(self.words[0])

    def write_table(self) -> None:
        words = self.words
        flat = np.array(self.entries, np.int64).reshape(-1)
        words[_HEADER_WORDS:_HEADER_WORDS + flat.size] = flat
        words[1] = len(self.entries)
        words[0] += 1
        self.generation = int(words[0])

    def close(self) -> None:
        self.bytes = self.words = None
        try:
            if self._map is not None:
                self._map.close()
        except BufferError:  # a view still in use: the pages go with it
            pass
        os.close(self.fd)
        self.fd = -1


class _Region(PrivateCopy):
    """A region this rank attached: the program's bytes, the private copy
    of the public ones at ``offset`` of the rank's file."""

    def __init__(self, private: np.ndarray, offset: int):
        super().__init__(private)
        self.offset = offset


class DynamicMemory:
    """The attached memory of one dynamic window on one rank (see the module docstring)."""

    def __init__(self, sc, segment):
        """Collective over ``sc``, the window's SimComm; ``segment`` is its
        window segment (for the table locks)."""
        self.segment, self.rank = segment, sc.rank
        self.label = f"rank {sc.rank}"  # who calls, for messages (the window sets it)
        fd = os.memfd_create("mpi4py-win-attached", os.MFD_CLOEXEC)
        os.ftruncate(fd, _DATA_START)
        self.files: dict[int, _RegionFile] = {self.rank: _RegionFile(fd)}
        self.files[self.rank].read_table()
        self.where = sc.allgather(np.array([os.getpid(), fd], np.int64))
        self.regions: dict[int, _Region] = {}  # by address

    # -- this rank's regions ---------------------------------------------------------------
    def attach(self, raw: np.ndarray, call: str = "Win.Attach") -> None:
        """Make ``raw`` (the program's bytes) a region of the window."""
        if not raw.size:
            return  # nothing can be reached in it (Open MPI keeps no region either)
        address, nbytes = raw.ctypes.data, raw.size
        own = self.files[self.rank]
        with self.segment.table_lock(self.rank):  # this process alone writes its table: its copy is current
            clash = next(((a, n) for a, n, _ in own.entries if a < address + nbytes and address < a + n), None)
            if clash is not None:
                raise MPIException(ERR_RMA_ATTACH, f"{call} on {self.label}: {nbytes} bytes at address "
                                   f"{address:#x} overlap the attached region of {clash[1]} bytes at {clash[0]:#x}")
            if len(own.entries) >= MAX_REGIONS:
                raise MPIException(ERR_RMA_ATTACH, f"{call} on {self.label}: {MAX_REGIONS} regions are "
                                   "attached already (the most a rank can attach at once)")
            offset = self._place(own, nbytes)
            own.bytes[offset:offset + nbytes] = raw  # its contents are public at once
            own.entries = sorted(own.entries + [(address, nbytes, offset)])
            own.write_table()
        self.regions[address] = _Region(raw, offset)

    def _place(self, own: _RegionFile, nbytes: int) -> int:
        """The file offset for a new region of ``nbytes``: the first gap that
        holds it, else past the last region (the file grows)."""
        end = _DATA_START
        for _, n, offset in sorted(own.entries, key=lambda e: e[2]):
            if offset - end >= nbytes:
                return end
            end = -(-(offset + n) // _ALIGN) * _ALIGN
        if end + nbytes > own.length:
            os.ftruncate(own.fd, -(-(end + nbytes) // _GROWTH) * _GROWTH)
            own.remap()
        return end

    def detach(self, raw: np.ndarray, call: str = "Win.Detach") -> None:
        """The region that starts at ``raw``'s address leaves the window (reconciled first)."""
        address = raw.ctypes.data
        region = self.regions.get(address)
        if region is None:
            raise MPIException(ERR_UNKNOWN, f"{call} on {self.label}: no region attached at address "
                               f"{address:#x} ({raw.size} bytes)")
        region.to_public(self._public(region))
        region.to_private(self._public(region))
        own = self.files[self.rank]
        with self.segment.table_lock(self.rank):
            own.entries = [e for e in own.entries if e[0] != address]
            own.write_table()
        del self.regions[address]

    def _public(self, region: _Region) -> np.ndarray:
        """The public copy of ``region`` (only ``_place`` grows this rank's file, and maps it again)."""
        return self.files[self.rank].bytes[region.offset:region.offset + region.private.size]

    def to_public(self) -> None:
        """What the program stored in its regions since the last reconciliation goes public."""
        for region in self.regions.values():
            region.to_public(self._public(region))

    def to_private(self) -> None:
        for region in self.regions.values():
            region.to_private(self._public(region))

    # -- the targets' regions ---------------------------------------------------------------
    def _file(self, rank: int, call: str = "") -> _RegionFile:
        """``rank``'s file, its table current (read again only if it changed)."""
        f = self.files.get(rank)
        if f is None:
            pid, fd = (int(v) for v in self.where[rank])
            try:
                f = _RegionFile(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC))
            except OSError as exc:  # only a process that has gone closes it before Win.Free
                raise MPIException(ERR_PROC_FAILED, f"Win.{call} on {self.label}: rank {rank} of the window has "
                                   f"exited, and its attached memory with it ({exc.strerror})") from None
            f.remap()
            self.files[rank] = f
        if int(f.words[0]) != f.generation:
            with self.segment.table_lock(rank):
                f.read_table()
        return f

    def locate(self, rank: int, address: int, nbytes: int, call: str) -> int:
        """The file offset of ``nbytes`` at ``address`` of ``rank``: they must lie in one region."""
        for start, size, offset in self._file(rank, call).entries:
            if start <= address and address + nbytes <= start + size:
                return offset + address - start
        raise MPIException(ERR_RMA_RANGE, f"Win.{call} on {self.label}: {nbytes} bytes at address {address:#x} "
                           f"are not inside one region attached by rank {rank} of the dynamic window")

    def target(self, rank: int, offset: int, nbytes: int) -> np.ndarray:
        """The public bytes of ``rank`` at ``offset`` of its file (from ``locate``)."""
        f = self._file(rank)
        if offset + nbytes > f.length:
            f.remap()
        return f.bytes[offset:offset + nbytes]

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files, self.regions = {}, {}
