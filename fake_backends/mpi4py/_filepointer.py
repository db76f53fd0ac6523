"""The shared file pointer of an open MPI file.

Every rank of the file's communicator reads and moves one pointer: it
lives in a small file that rank 0 creates in the temporary directory,
every rank opens, and rank 0 unlinks once all have it open (inside Open),
so nothing is left on disk whichever way the ranks end. Each call locks
the file (``flock``, on the rank's own descriptor) while it reads the
pointer, accesses the data and moves it.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile


def create() -> str:
    """A new shared pointer at 0: the path of its file (``unlink`` it once
    every rank has ``attach``-ed it)."""
    fd, path = tempfile.mkstemp(prefix="simdist-shared-pointer-")
    os.write(fd, struct.pack("q", 0))
    os.close(fd)
    return path


def attach(path: str) -> int:
    """This rank's descriptor of the pointer (``detach`` it at Close)."""
    return os.open(path, os.O_RDWR)


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def detach(fd: int) -> None:
    os.close(fd)


class locked:
    """The shared file pointer (``.value``), under an exclusive lock."""

    def __init__(self, fd: int):
        self.fd = fd

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.value = struct.unpack("q", os.pread(self.fd, 8, 0))[0]
        return self

    def __exit__(self, *exc):
        try:
            os.pwrite(self.fd, struct.pack("q", self.value), 0)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


def read(fd: int) -> int:
    with locked(fd) as pointer:
        return pointer.value


def write(fd: int, value: int) -> None:
    with locked(fd) as pointer:
        pointer.value = value
