"""Where the bytes of a derived datatype's receive buffer go back.

A call parses a buffer of a derived datatype into its packed bytes (a
copy, ``BufSpec.raw``); what the call receives lands there, and the
buffer's own memory gets it only when the packed bytes are *stored*:
``raw[index] = packed``, which writes exactly the bytes the type map
covers and leaves its holes untouched. A blocking call runs inside
``unpacking`` (a decorator): the receive buffers it parses register in its
frame and are stored when it returns; a call that raises stores nothing,
so it leaves the buffers as they were. A receive that completes later
(Irecv, a nonblocking neighbour collective) stores from its completion
instead (``on_complete``). A nonblocking or persistent collective is
prepared inside ``deferred``: it gets the buffers its preparation parsed,
stores the receive buffers when it completes and packs the send buffers
again at each start (``repack``), so a persistent request sends what the
buffer holds when it is started.

The memory of ``MPI.BOTTOM`` (a datatype whose displacements are
addresses) and of ``MPI.buffer.fromaddress`` is in ``_addressed``.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

_FRAMES: list[list] = []  # one list of (spec, writable) per call in progress


def register(spec, writable: bool = True) -> None:
    """Store ``spec`` (a receive buffer: ``writable``) when the innermost
    blocking call returns (if any); a deferred call gets send buffers too."""
    if _FRAMES:
        _FRAMES[-1].append((spec, writable))


@contextlib.contextmanager
def deferred():
    """Collect the derived-datatype buffers parsed in the block, as
    ``(spec, writable)``, for a call that completes later."""
    _FRAMES.append([])
    try:
        yield _FRAMES[-1]
    finally:
        _FRAMES.pop()


def repack(spec) -> None:
    """Refresh a send buffer's packed bytes from its memory, in place."""
    spec.raw[...] = spec.layout.gather(spec.target)


def unpacking(method):
    """Run a blocking call; store its registered receive buffers when it returns."""

    @functools.wraps(method)
    def call(*args, **kwargs):
        _FRAMES.append([])
        try:
            result = method(*args, **kwargs)
            specs = _FRAMES[-1]
        finally:
            _FRAMES.pop()
        for spec, writable in specs:
            if writable:
                spec.store()
        return result

    return call


def unpacking_class(names):
    """Class decorator: wrap the methods ``names`` with ``unpacking``."""

    def decorate(cls):
        for name in names:
            setattr(cls, name, unpacking(cls.__dict__[name]))
        return cls

    return decorate


class Completion:
    """Store ``specs`` once ``n`` receives have completed (``done()`` each)."""

    def __init__(self, specs, n: int):
        self.specs, self.left = [s for s in specs if s.target is not None], n
        if n == 0:
            self._store()

    def done(self, _nbytes: int = 0) -> None:
        self.left -= 1
        if self.left == 0:
            self._store()

    def _store(self) -> None:
        for spec in self.specs:
            spec.store()


def check_signatures(sendtype, sendcount: int, recvtype, recvcount: int, call: str) -> None:
    """MPI.Exception unless ``sendcount`` x ``sendtype`` has the type signature of ``recvcount`` x ``recvtype``:
    ERR_TYPE where a basic type differs, ERR_TRUNCATE where the send is longer."""
    from ._errors import ERR_TRUNCATE, ERR_TYPE, Exception as MPIException

    sent = np.tile(sendtype._typemap(call).codes, sendcount)
    wanted = np.tile(recvtype._typemap(call).codes, recvcount)
    common = min(sent.size, wanted.size)
    if not np.array_equal(sent[:common], wanted[:common]):
        raise MPIException(ERR_TYPE, f"{call}: the send's type signature (basic types) differs from the receive's")
    if sent.size != wanted.size:
        raise MPIException(ERR_TRUNCATE, f"{call}: {sent.size} basic elements sent for {wanted.size} received")
