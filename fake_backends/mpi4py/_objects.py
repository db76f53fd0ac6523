"""The object collectives of the stand-in's communicators (lowercase API).

Objects travel as pickles (``MPI.pickle``). A pickle's length differs from
rank to rank, so each call first exchanges the lengths with one simdist
collective, then the pickles, padded to the longest, with another; both go
through the rank's SimComm, so mismatched calls raise
``simdist.CollectiveMismatch`` on every rank. Every rank gets new objects
(unpickled copies), also the root of ``bcast``, as in mpi4py. Reductions
are mpi4py's naive ones, in rank order (``_ops.fold_objects``).

As mpi4py, a call holds its communicator's lock of the call's name
(``_locks``) around its messages only, never while it pickles or
unpickles: a finalizer (``__del__``) that the garbage collector runs then
may make the same call again, as libraries that free remote objects from
finalizers do.
"""

from __future__ import annotations

import numpy as np

from ._locks import _comm_lock
from ._ops import PREDEFINED, fold_objects
from ._pickle import pickle

SUM = PREDEFINED["SUM"]


def _dump(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj), np.uint8)


def _load(data: np.ndarray):
    return pickle.loads(memoryview(np.ascontiguousarray(data)))


def _padded(pickles: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(pickles), width), np.uint8)
    for row, data in zip(out, pickles):
        row[:data.size] = data
    return out


def _items(sendobj, size: int, call: str) -> list:
    if sendobj is None:  # as mpi4py: None sends None to every rank
        return [None] * size
    try:
        items = list(sendobj)
    except TypeError:
        raise TypeError(f"{call}: expecting a sequence of {size} items, got {type(sendobj).__name__}") from None
    if len(items) != size:
        raise ValueError(f"{call}: expecting {size} items, got {len(items)}")
    return items


class ObjectCollectives:
    """Mixin of Comm: barrier, bcast, gather, scatter, allgather, alltoall,
    reduce, allreduce (and, on Intracomm, scan and exscan)."""

    def barrier(self) -> None:
        """Return once every rank of the communicator has called it."""
        self.Barrier()

    def bcast(self, obj, root: int = 0):
        """Root's ``obj`` on every rank (a copy, on the root too)."""
        st, sc = self._coll()
        root = self._root(st, root, "bcast")
        data = _dump(obj) if st.rank == root else None
        with _comm_lock(self, "bcast"):
            data = sc.broadcast(data, root)
        return _load(data)

    def gather(self, sendobj, root: int = 0):
        """The list of every rank's object, in rank order, on root; None elsewhere."""
        st, sc = self._coll()
        root = self._root(st, root, "gather")
        data = _dump(sendobj)
        with _comm_lock(self, "gather"):
            lengths = sc.allgather(np.int64(data.size))
            out = sc.gather(_padded([data], int(lengths.max()))[0], root)
        if out is None:
            return None
        return [_load(out[j, :lengths[j]]) for j in range(st.size)]

    def scatter(self, sendobj, root: int = 0):
        """Item ``r`` of root's sequence on rank ``r``."""
        st, sc = self._coll()
        root = self._root(st, root, "scatter")
        if st.rank == root:
            pickles = [_dump(item) for item in _items(sendobj, st.size, "scatter")]
            with _comm_lock(self, "scatter"):
                lengths = sc.broadcast(np.array([p.size for p in pickles], np.int64), root)
                out = sc.scatter(_padded(pickles, int(lengths.max())), root)
        else:
            with _comm_lock(self, "scatter"):
                lengths = sc.broadcast(None, root)
                out = sc.scatter(None, root)
        return _load(out[:lengths[st.rank]])

    def allgather(self, sendobj) -> list:
        """The list of every rank's object, in rank order, on every rank."""
        st, sc = self._coll()
        data = _dump(sendobj)
        with _comm_lock(self, "allgather"):
            lengths = sc.allgather(np.int64(data.size))
            out = sc.allgather(_padded([data], int(lengths.max()))[0])
        return [_load(out[j, :lengths[j]]) for j in range(st.size)]

    def alltoall(self, sendobj) -> list:
        """Item ``j`` of rank ``i``'s sequence becomes item ``i`` of rank ``j``'s result."""
        st, sc = self._coll()
        pickles = [_dump(item) for item in _items(sendobj, st.size, "alltoall")]
        with _comm_lock(self, "alltoall"):
            lengths = sc.allgather(np.array([p.size for p in pickles], np.int64))  # [from, to]
            out = sc.alltoall(_padded(pickles, int(lengths.max())))
        return [_load(out[j, :lengths[j, st.rank]]) for j in range(st.size)]

    def reduce(self, sendobj, op=SUM, root: int = 0):
        """``op`` folded over every rank's object in rank order, on root; None elsewhere."""
        items = self.gather(sendobj, root)
        return None if items is None else fold_objects(op, items)

    def allreduce(self, sendobj, op=SUM):
        """``op`` folded over every rank's object in rank order, on every rank."""
        return fold_objects(op, self.allgather(sendobj))

    def scan(self, sendobj, op=SUM):
        """``op`` folded over the objects of ranks ``0..rank``."""
        items = self.allgather(sendobj)
        return fold_objects(op, items[:self._st().rank + 1])

    def exscan(self, sendobj, op=SUM):
        """``op`` folded over the objects of ranks ``0..rank-1``; None on rank 0."""
        items = self.allgather(sendobj)
        rank = self._st().rank
        return None if rank == 0 else fold_objects(op, items[:rank])
