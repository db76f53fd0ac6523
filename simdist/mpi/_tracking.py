"""Where is this MPI rank? A communicator wrapper that remembers its current call.

An MPI rank cannot share a status table with the driver, as the
simulator's ranks do: it wraps its communicator in :class:`TrackedComm`,
and a thread of the rank answers the driver's "where are you?" from it,
while the main thread may be blocked inside the MPI library. The driver
words the answers with the sentences both backends share
(``simdist._whereabouts``).
"""

from __future__ import annotations

import numpy as np

from .. import _whereabouts
from .._communicator import Communicator
from .._whereabouts import CALL, USER


class Whereabouts:
    """The state of one rank, written by its main thread, read by another."""

    def __init__(self) -> None:
        self.state = USER
        self.calls = 0  # calls completed
        self.current: tuple = ()  # (name, seq, details) of the call in progress

    def snapshot(self) -> tuple:
        return self.state, self.calls, self.current

    @staticmethod
    def describe(snapshot: tuple, waited: float | None = None) -> str:
        """One line saying what the rank of ``snapshot`` is doing."""
        state, calls, current = snapshot
        if state != CALL:
            return _whereabouts.describe(state, calls)
        name, seq, details = current
        call = f"{name} #{seq} ({details})" if details else f"{name} #{seq}"
        return _whereabouts.describe(CALL, calls, call, waited)


def _details(x=None, **kw) -> str:
    parts = []
    if isinstance(x, np.ndarray):
        parts.append(f"{x.dtype} {x.shape}")
    parts += [f"{k}={v}" for k, v in kw.items()]
    return ", ".join(parts)


class TrackedComm(Communicator):
    """``comm`` with every call recorded in ``where`` (see the module doc).

    Sub-communicators from :meth:`split` are tracked too, in the same record.
    """

    def __init__(self, comm, where: Whereabouts, name: str = "the world"):
        self._comm = comm
        self._where = where
        self._name = name
        self._seq = 0

    @property
    def rank(self) -> int:
        return self._comm.rank

    @property
    def size(self) -> int:
        return self._comm.size

    def _call(self, name: str, method, *args, x=None, **kw):
        where = self._where
        self._seq += 1
        where.current = (name, self._seq, _details(x, **kw) + (f" on {self._name}" if self._name != "the world" else ""))
        where.state = CALL
        try:
            return method(*args)
        finally:
            where.calls += 1
            where.state = USER

    def allreduce(self, x, op="sum"):
        return self._call("allreduce", self._comm.allreduce, x, op, x=x, op=op)

    def reduce(self, x, root=0, op="sum"):
        return self._call("reduce", self._comm.reduce, x, root, op, x=x, root=root, op=op)

    def broadcast(self, x, root=0):
        return self._call("broadcast", self._comm.broadcast, x, root, x=x, root=root)

    def allgather(self, x):
        return self._call("allgather", self._comm.allgather, x, x=x)

    def gather(self, x, root=0):
        return self._call("gather", self._comm.gather, x, root, x=x, root=root)

    def scatter(self, x, root=0):
        return self._call("scatter", self._comm.scatter, x, root, x=x, root=root)

    def reduce_scatter(self, x, op="sum"):
        return self._call("reduce_scatter", self._comm.reduce_scatter, x, op, x=x, op=op)

    def alltoall(self, x):
        return self._call("alltoall", self._comm.alltoall, x, x=x)

    def barrier(self):
        return self._call("barrier", self._comm.barrier)

    def send(self, x, dest, tag=0):
        return self._call("send", self._comm.send, x, dest, tag, x=x, dest=dest, tag=tag)

    def recv(self, source, tag=0):
        return self._call("recv", self._comm.recv, source, tag, source=source, tag=tag)

    def split(self, color, key=0):
        sub = self._call("split", self._comm.split, color, key, color=color, key=key)
        return None if sub is None else TrackedComm(sub, self._where, f"a sub-communicator (color {color})")

    def free(self):
        return self._call("free", self._comm.free)

    def mpi4py_dup(self):
        return self._comm.mpi4py_dup()
