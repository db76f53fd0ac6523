"""The neighbour collectives of topology communicators (a mixin of
``Topocomm``): ``Neighbor_allgather(v)``, ``Neighbor_alltoall(v/w)``, their
nonblocking ``I`` forms and the object forms ``neighbor_allgather`` and
``neighbor_alltoall``, and the persistent ``Neighbor_..._init`` forms.

Each is built on the stand-in's point-to-point engine (``_p2p``): a rank
posts one receive per incoming neighbour, in neighbour order, then one send
per outgoing neighbour, and the call's request completes when all have.
They travel in a context of their own, the communicator's with bit 61
flipped, so no user receive (not even ANY_SOURCE, ANY_TAG) matches them.
Since MPI's messages from one sender with one tag arrive in order, the
k-th receive from a neighbour takes its k-th send: neighbours named twice
(a graph with repeated edges) and successive neighbour collectives pair up
in call order, deterministically. Cartesian communicators tag each
direction (see ``_topologies.Cart.neighbors``), so that with a periodic
dimension of one or two processes the block sent up lands in the lower
slot, as MPI 4.0 and Open MPI define. ``MPI.PROC_NULL`` neighbours (the
edges of a non-periodic grid) are skipped: their receive block is left as
it was, and the object forms give None for them.
"""

from __future__ import annotations

import numpy as np

from ._buffers import BOTTOM, parse, parse_vector
from ._errors import ERR_ARG, ERR_BUFFER, Exception as MPIException
from ._interfaces import _array, _host_memory
from ._p2p import PICKLED, PROC_NULL, SendOp
from ._pickle import pickle
from ._requests import Prequest, Request

#: Flipped in a communicator's context to give that of its neighbour collectives.
RESERVED_CONTEXT_BIT = 1 << 61


class NeighborOp(SendOp):
    """The receives and sends of one neighbour collective, as one request's
    operation: done when all are; its error is the first of theirs."""

    __slots__ = ("ops", "recvs")
    done = property(lambda self: all(op.done for op in self.ops))
    error = property(lambda self: next((op.error for op in self.ops if op.error is not None), None))

    def __init__(self, recvs, sends, desc: str):  # noqa: D107 - SendOp's state is not used
        self.recvs = recvs
        self.ops = [op for op in recvs if op is not None] + sends
        self.desc = desc


def _blocks(raw: np.ndarray, n: int) -> list[np.ndarray]:
    """``raw`` cut in ``n`` equal blocks."""
    size = raw.size // n if n else 0
    return [raw[j * size:(j + 1) * size] for j in range(n)]


def _vector_blocks(spec, n: int, writable: bool, what: str) -> list[np.ndarray]:
    if n == 0:
        return []
    vec = parse_vector(spec, writable=writable, blocks=n, what=what)
    return [vec.block(j) for j in range(n)]


def _at_address(address: int, nbytes: int, writable: bool, what: str) -> np.ndarray:
    """The ``nbytes`` bytes at ``address`` (a displacement from MPI.BOTTOM),
    which must be this process's mapped memory."""
    if nbytes and not _host_memory(address, nbytes, writable):
        raise MPIException(ERR_BUFFER, f"{what}: {nbytes} bytes at address {address:#x} (from MPI.BOTTOM) are not "
                                       f"{'writable' if writable else 'readable'} memory of this process")
    return _array(address, nbytes, not writable, None)


def _w_blocks(spec, n: int, writable: bool, what: str) -> list[np.ndarray]:
    """The blocks of an Alltoallw buffer: ``[buf, (counts, displs), types]``
    or ``[buf, counts, displs, types]``, displacements in bytes (from
    ``MPI.BOTTOM``, absolute addresses: ``MPI.Get_address``)."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (3, 4):
        raise ValueError(f"message: expecting [buf, (counts, displs), datatypes] for {what}")
    buf, counts, displs, types = spec if len(spec) == 4 else (spec[0], *spec[1], spec[2])
    counts, displs, types = list(counts), list(displs), list(types)
    if not len(counts) == len(displs) == len(types) == n:
        raise ValueError(f"message: expecting {n} counts, displacements and datatypes in {what}")
    if buf is None or buf is BOTTOM:
        return [_at_address(int(displ), int(count) * datatype.Get_size(), writable, what)
                for count, displ, datatype in zip(counts, displs, types)]
    raw = parse(buf, writable=writable, what=what).raw
    blocks = []
    for j, (count, displ, datatype) in enumerate(zip(counts, displs, types)):
        nbytes = int(count) * datatype.Get_size()
        if int(count) < 0 or int(displ) < 0 or int(displ) + nbytes > raw.size:
            raise ValueError(f"message: block {j} of {what} (count {count}, displacement {displ} bytes) does not "
                             f"fit in its {raw.size} bytes")
        blocks.append(raw[int(displ):int(displ) + nbytes])
    return blocks


class NeighborCollectives:
    """Mixin of Topocomm (see the module docstring); the class provides
    ``_st()``, whose state has the topology (``topo``)."""

    def _neighbor_lists(self):
        st = self._st()
        return st, st.topo.neighbors(st.rank)

    @staticmethod
    def _prepare(st, lists, sends, sinks, call: str, flags: int = 0):
        """Check one neighbour collective; return ``post()``, which posts its
        receives (into ``sinks``; None: a pickle) and sends, and returns its
        request. As for point-to-point, the checks raise, posting does not."""
        sources, destinations, recv_tags, send_tags = lists
        if len(sends) != len(destinations):
            raise MPIException(ERR_ARG, f"{call}: {len(sends)} blocks to send for {len(destinations)} neighbours "
                                        f"on {st.name}")
        engine, ctx = st.engine, st.ctx ^ RESERVED_CONTEXT_BIT
        desc = f"{call} on {st.name}"
        sends = [np.ascontiguousarray(data).view(np.uint8).reshape(-1) for data in sends]

        def post() -> Request:
            recvs = [None if source == PROC_NULL else
                     engine.recv(ctx, source, tag, sink, f"{call} (from neighbour {source}) on {st.name}")
                     for source, tag, sink in zip(sources, recv_tags, sinks)]
            ops = [engine.send(st.members[dest], ctx, st.rank, tag, data, flags, False, desc)
                   for dest, tag, data in zip(destinations, send_tags, sends) if dest != PROC_NULL]
            engine.progress()
            return Request._of(engine, NeighborOp(recvs, ops, desc))

        return post

    # -- buffers ------------------------------------------------------------------------------
    def _allgather(self, sendbuf, recvbuf, call: str, vector: bool):
        st, lists = self._neighbor_lists()
        n_in, n_out = len(lists[0]), len(lists[1])
        data = parse(sendbuf, writable=False, what="sendbuf").raw
        if vector:
            sinks = _vector_blocks(recvbuf, n_in, True, "recvbuf")
        else:
            sinks = _blocks(parse(recvbuf, writable=True, blocks=n_in, what="recvbuf").raw, n_in)
        return self._prepare(st, lists, [data] * n_out, sinks, call)

    def _alltoall(self, sendbuf, recvbuf, call: str, form: str):
        st, lists = self._neighbor_lists()
        n_in, n_out = len(lists[0]), len(lists[1])
        if form == "w":
            sends = _w_blocks(sendbuf, n_out, False, "sendbuf")
            sinks = _w_blocks(recvbuf, n_in, True, "recvbuf")
        elif form == "v":
            sends = _vector_blocks(sendbuf, n_out, False, "sendbuf")
            sinks = _vector_blocks(recvbuf, n_in, True, "recvbuf")
        else:
            sends = _blocks(parse(sendbuf, writable=False, blocks=n_out, what="sendbuf").raw, n_out)
            sinks = _blocks(parse(recvbuf, writable=True, blocks=n_in, what="recvbuf").raw, n_in)
        return self._prepare(st, lists, sends, sinks, call)

    def Ineighbor_allgather(self, sendbuf, recvbuf) -> Request:
        """Every incoming neighbour's ``sendbuf``, in neighbour order, into ``recvbuf``."""
        return self._allgather(sendbuf, recvbuf, "Ineighbor_allgather", False)()

    def Ineighbor_allgatherv(self, sendbuf, recvbuf) -> Request:
        return self._allgather(sendbuf, recvbuf, "Ineighbor_allgatherv", True)()

    def Ineighbor_alltoall(self, sendbuf, recvbuf) -> Request:
        """Block ``j`` of ``sendbuf`` to outgoing neighbour ``j``; block ``i``
        of ``recvbuf`` from incoming neighbour ``i``."""
        return self._alltoall(sendbuf, recvbuf, "Ineighbor_alltoall", "")()

    def Ineighbor_alltoallv(self, sendbuf, recvbuf) -> Request:
        return self._alltoall(sendbuf, recvbuf, "Ineighbor_alltoallv", "v")()

    def Ineighbor_alltoallw(self, sendbuf, recvbuf) -> Request:
        return self._alltoall(sendbuf, recvbuf, "Ineighbor_alltoallw", "w")()

    def Neighbor_allgather(self, sendbuf, recvbuf) -> None:
        self._allgather(sendbuf, recvbuf, "Neighbor_allgather", False)().Wait()

    def Neighbor_allgatherv(self, sendbuf, recvbuf) -> None:
        self._allgather(sendbuf, recvbuf, "Neighbor_allgatherv", True)().Wait()

    def Neighbor_alltoall(self, sendbuf, recvbuf) -> None:
        self._alltoall(sendbuf, recvbuf, "Neighbor_alltoall", "")().Wait()

    def Neighbor_alltoallv(self, sendbuf, recvbuf) -> None:
        self._alltoall(sendbuf, recvbuf, "Neighbor_alltoallv", "v")().Wait()

    def Neighbor_alltoallw(self, sendbuf, recvbuf) -> None:
        self._alltoall(sendbuf, recvbuf, "Neighbor_alltoallw", "w")().Wait()

    def Neighbor_allgather_init(self, sendbuf, recvbuf, info=None) -> Prequest:
        """A persistent Neighbor_allgather (collective): each ``Start`` runs it
        on the buffers' contents at that time."""
        return Prequest(_start=self._allgather(sendbuf, recvbuf, "Neighbor_allgather_init", False))

    def Neighbor_allgatherv_init(self, sendbuf, recvbuf, info=None) -> Prequest:
        return Prequest(_start=self._allgather(sendbuf, recvbuf, "Neighbor_allgatherv_init", True))

    def Neighbor_alltoall_init(self, sendbuf, recvbuf, info=None) -> Prequest:
        return Prequest(_start=self._alltoall(sendbuf, recvbuf, "Neighbor_alltoall_init", ""))

    def Neighbor_alltoallv_init(self, sendbuf, recvbuf, info=None) -> Prequest:
        return Prequest(_start=self._alltoall(sendbuf, recvbuf, "Neighbor_alltoallv_init", "v"))

    def Neighbor_alltoallw_init(self, sendbuf, recvbuf, info=None) -> Prequest:
        return Prequest(_start=self._alltoall(sendbuf, recvbuf, "Neighbor_alltoallw_init", "w"))

    # -- objects ------------------------------------------------------------------------------
    def _objects(self, sendobjs, call: str) -> list:
        st, lists = self._neighbor_lists()
        pickles = [np.frombuffer(pickle.dumps(obj), np.uint8) for obj in sendobjs]
        req = self._prepare(st, lists, pickles, [None] * len(lists[0]), call, PICKLED)()
        recvs = req._op.recvs
        req.Wait()
        return [None if op is None or not op.data.size else pickle.loads(memoryview(op.data)) for op in recvs]

    def neighbor_allgather(self, sendobj) -> list:
        """Every incoming neighbour's object, in neighbour order (None for MPI.PROC_NULL)."""
        st, lists = self._neighbor_lists()
        return self._objects([sendobj] * len(lists[1]), "neighbor_allgather")

    def neighbor_alltoall(self, sendobj) -> list:
        """``sendobj[j]`` to outgoing neighbour ``j``; the objects of the incoming neighbours."""
        st, lists = self._neighbor_lists()
        sendobj = list(sendobj) if sendobj is not None else [None] * len(lists[1])
        if len(sendobj) != len(lists[1]):
            raise ValueError(f"expecting {len(lists[1])} items, got {len(sendobj)}")
        return self._objects(sendobj, "neighbor_alltoall")
