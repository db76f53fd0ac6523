"""Partitioned point-to-point communication (MPI 4.0): ``Comm.Psend_init``,
``Comm.Precv_init`` and a partitioned request's ``Pready``,
``Pready_range``, ``Pready_list`` and ``Parrived``.

A partitioned send is a persistent send of the whole buffer, posted when
the last of its partitions is marked ready (MPI lets the library move the
partitions at any time between ``Pready`` and completion); a partitioned
receive is a persistent receive whose partitions have all arrived once its
message has. Both travel in a context of their own (the communicator's
with bit 56 flipped), so a partitioned send matches only a partitioned
receive, as MPI says. A Wait on a send with a partition not marked ready
waits for ever, as in MPI: the engine reports it as a hang naming the call.
"""

from __future__ import annotations

import operator

from ._buffers import parse
from ._errors import ERR_ARG, ERR_REQUEST, Exception as MPIException
from ._p2p import SendOp
from ._requests import Prequest

PARTITIONED_BIT = 1 << 56


def _partitions(buf, partitions, call: str) -> int:
    n = operator.index(partitions)
    if n < 1:
        raise MPIException(ERR_ARG, f"{call}: partitions={partitions!r} must be at least 1")
    count = parse(buf, writable=False, what="buf").count
    if count % n:
        raise ValueError(f"message: count {count} is not a multiple of partitions {n}")
    return n


def _not_partitioned(name: str):
    def refused(self, *args):
        raise MPIException(ERR_REQUEST, f"{name} on a persistent request that is not partitioned")

    refused.__name__ = name
    return refused


for _name in ("Pready", "Pready_range", "Pready_list", "Parrived"):  # mpi4py's Prequest has them all
    setattr(Prequest, _name, _not_partitioned(_name))


class PartitionedCalls:
    """Mixin of Comm: Psend_init and Precv_init."""

    def Psend_init(self, buf, partitions: int, dest: int, tag: int = 0, info=None) -> "Partitioned":
        n = _partitions(buf, partitions, "Psend_init")
        post = self._persistent_send(buf, dest, tag, False, "Psend_init", PARTITIONED_BIT)
        st = self._st()
        peer = st.members[dest] if 0 <= dest < st.size else st.members[st.rank]  # (MPI.PROC_NULL: itself)
        return Partitioned(post, n, st.engine, sending=True, desc=f"Psend_init(dest={dest}, tag={tag})", peer=peer)

    def Precv_init(self, buf, partitions: int, source: int, tag: int = 0, info=None) -> "Partitioned":
        n = _partitions(buf, partitions, "Precv_init")
        post = self._prepare_recv(self._sink(buf), source, tag, "Precv_init", PARTITIONED_BIT)
        return Partitioned(post, n, self._st().engine, sending=False, desc=f"Precv_init(source={source}, tag={tag})")


class Partitioned(Prequest):
    """A partitioned request (see the module docstring)."""

    def _init(self, post, partitions: int, engine, *, sending: bool, desc: str, peer: int = 0) -> None:
        super()._init(_start=post)
        self._engine, self._peer = engine, peer  # the world rank a send goes to
        self._partitions, self._sending, self._desc = partitions, sending, desc
        self._ready: set[int] = set()

    def _post(self) -> None:
        if not self._sending:
            super()._post()
            return
        self._ready = set()
        self._op = SendOp(self._peer, f"{self._desc}: {self._partitions} partitions, none marked ready (Pready)")

    def _partition(self, partition, call: str) -> int:
        if self._start is None:
            raise MPIException(ERR_REQUEST, f"{call} on a freed partitioned request")
        index = operator.index(partition)
        if not 0 <= index < self._partitions:
            raise MPIException(ERR_ARG, f"{call}: partition {partition!r} of {self._partitions}")
        return index

    def Pready(self, partition: int) -> None:
        """Mark ``partition`` of a started partitioned send ready."""
        if not self._sending:
            raise MPIException(ERR_REQUEST, "Pready on a partitioned receive")
        index = self._partition(partition, "Pready")
        if self._op is None:
            raise MPIException(ERR_REQUEST, "Pready on a partitioned send that is not started (Start it first)")
        self._ready.add(index)
        if self._op.done:  # (the message went with its last partition)
            return
        missing = sorted(set(range(self._partitions)) - self._ready)
        if missing:
            self._op.desc = f"{self._desc}: partitions {missing} not marked ready (Pready)"
        else:
            super()._post()

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        for partition in range(operator.index(partition_low), operator.index(partition_high) + 1):
            self.Pready(partition)

    def Pready_list(self, partitions) -> None:
        for partition in partitions:
            self.Pready(partition)

    def Parrived(self, partition: int) -> bool:
        """Whether ``partition`` of a started partitioned receive has arrived."""
        if self._sending:
            raise MPIException(ERR_REQUEST, "Parrived on a partitioned send")
        self._partition(partition, "Parrived")
        if self._op is None:  # inactive: its message is in, as MPI says
            return True
        if not self._op.done:
            self._engine.progress()
        return bool(self._op.done)
