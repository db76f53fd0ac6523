"""The shared file pointer of an open MPI file.

Every rank of the file's communicator reads and moves one pointer: it
lives in a small file in the temporary directory, which each call locks
(``flock``) while it reads the pointer, accesses the data and moves it.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile


def create() -> str:
    """A new shared pointer at 0: the path of its file (removed with ``remove``)."""
    fd, path = tempfile.mkstemp(prefix="simdist-shared-pointer-")
    os.write(fd, struct.pack("q", 0))
    os.close(fd)
    return path


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class locked:
    """The shared file pointer (``.value``), under an exclusive lock."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.value = struct.unpack("q", os.pread(self.fd, 8, 0))[0]
        return self

    def __exit__(self, *exc):
        try:
            os.pwrite(self.fd, struct.pack("q", self.value), 0)
        finally:
            os.close(self.fd)  # releases the lock


def read(path: str) -> int:
    with locked(path) as pointer:
        return pointer.value


def write(path: str, value: int) -> None:
    with locked(path) as pointer:
        pointer.value = value
