"""The ranks' standard input, as ``mpiexec`` gives it: rank 0 reads the
driver's, every other rank reads ``/dev/null`` (end of file at once).

The driver's standard input is its descriptor 0, provided Python started
with one (``sys.__stdin__`` is not None: otherwise 0 may since have been
reused for anything). Without one, rank 0 reads ``/dev/null`` too.

* Simulator: the driver hands rank 0's worker a duplicate of its
  descriptor 0 when it starts it (the same open file: what rank 0 reads is
  gone for the driver, as with ``mpiexec``), and the worker puts it on its
  own descriptor 0.
* MPI backend: ``mpiexec`` gets ``/dev/null``, and every rank replaces
  the standard input its launcher gave it, which may never end: Open MPI
  5 forwards the input to rank 0 but never its end, MPICH's ``mpiexec``
  gives every rank a pipe that never ends for ranks other than 0 (a rank
  reading to the end blocks forever, also under a plain ``mpiexec``).
  Rank 0 runs on the driver's machine and opens the driver's
  descriptor 0 anew through ``/proc/<driver pid>/fd/0``: the same terminal
  or pipe; a regular file from the offset the driver's descriptor had when
  the MPI job started. A standard input that cannot be opened so (a socket)
  gives rank 0 ``/dev/null``, with a warning.

A rank blocked reading its standard input is running user code: while
peers wait for it in a call, the run's hang watch reports it after the
timeout, as it reports a rank that computes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys

_log = logging.getLogger("simdist")
#: The MPI job's environment variable telling rank 0 where the driver's stdin is.
VARIABLE = "SIMDIST_STDIN"


def driver_stdin() -> int | None:
    """A new descriptor of the driver's standard input (the caller closes
    it), or None when the driver has none."""
    if sys.__stdin__ is None:
        return None
    try:
        return os.dup(0)
    except OSError:
        return None


def take_stdin(fd: int | None) -> None:
    """In a rank: make ``fd`` its standard input, descriptor 0 and
    ``sys.stdin``, and close ``fd``. With None, descriptor 0 stays as the
    launcher left it (``/dev/null``, or, where the driver had no standard
    input, maybe a descriptor in use) and only a missing ``sys.stdin``
    becomes ``/dev/null``."""
    old = sys.__stdin__
    if fd is None:
        if sys.stdin is None:
            sys.stdin = open(os.devnull, encoding=getattr(old, "encoding", None))
        return
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    sys.stdin = open(0, encoding=getattr(old, "encoding", None), errors=getattr(old, "errors", None),
                     closefd=False)


# -- the MPI backend --------------------------------------------------------------
def _reopen(path: str) -> int:
    # O_NONBLOCK: opening a named pipe whose writer has gone would wait for
    # a new one; the flag is cleared once it is open. O_NOCTTY: a terminal
    # must not become the controlling terminal of the rank's session.
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def stdin_for_rank_0() -> str:
    """The value of :data:`VARIABLE` for a new MPI job: ``PID:OFFSET``
    (``PID:`` where the input has no offset), or ``""`` when rank 0 gets
    ``/dev/null``."""
    if sys.__stdin__ is None:
        return ""
    try:
        os.close(_reopen("/proc/self/fd/0"))
    except OSError as exc:
        if exc.errno != 2:  # ENOENT: descriptor 0 is closed; no input, nothing to say
            _log.warning("backend 'mpi': rank 0 reads /dev/null: the driver's standard input (%s) cannot "
                         "be opened again: %s", _what(0), exc.strerror)
        return ""
    try:
        offset = str(os.lseek(0, 0, os.SEEK_CUR))
    except OSError:  # a terminal or a pipe
        offset = ""
    return f"{os.getpid()}:{offset}"


def mpi_rank_stdin(rank: int, value: str) -> int:
    """A descriptor of what a rank of an MPI job reads: for rank 0 the
    driver's standard input, from :data:`VARIABLE`'s ``value``; else, or
    where that fails, ``/dev/null``. Never the launcher's: Open MPI's never
    ends for rank 0, MPICH's never ends for the other ranks."""
    if rank == 0 and value:
        pid, _, offset = value.partition(":")
        try:
            fd = _reopen(f"/proc/{pid}/fd/0")
        except OSError as exc:
            _log.warning("rank 0 reads /dev/null: the driver's standard input cannot be opened: %s", exc.strerror)
        else:
            if offset:
                os.lseek(fd, int(offset), os.SEEK_SET)
            return fd
    return os.open(os.devnull, os.O_RDONLY)


def _what(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"descriptor {fd}"
