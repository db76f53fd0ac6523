"""The vector collectives (Gatherv, Scatterv, Allgatherv, Alltoallv).

Blocks differ in length from rank to rank, and a simdist collective needs
one shape on every rank; so each call first exchanges the blocks' byte
counts with one simdist collective, then the blocks as bytes padded to the
longest with another. Both go through the rank's SimComm, so a rank that
calls something else raises ``simdist.CollectiveMismatch`` everywhere. A
block whose length differs from what its receiver expects raises
``MPI.Exception`` (``ERR_TRUNCATE``) on the receiver.
"""

from __future__ import annotations

import numpy as np

from ._buffers import is_in_place, parse, parse_vector, parse_w
from ._errors import ERR_TRUNCATE, Exception as MPIException
from ._unpacking import unpacking_class


def _padded(blocks: list[np.ndarray], width: int) -> np.ndarray:
    out = np.empty((len(blocks), width), np.uint8)
    for row, data in zip(out, blocks):
        row[:data.size] = data
        row[data.size:] = 0
    return out


def _place(dest: np.ndarray, data: np.ndarray, call: str, source: int) -> None:
    if data.size != dest.size:
        raise MPIException(ERR_TRUNCATE, f"{call}: rank {source} sent {data.size} bytes for a block of "
                                         f"{dest.size} bytes")
    dest[...] = data


def _land(spec, data: np.ndarray, call: str, source: int) -> None:
    """Receive ``data`` into a parsed block: a derived datatype's packed
    bytes become ``data`` itself, stored from there when the call returns."""
    if spec.target is None or data.size != spec.raw.size:
        _place(spec.raw, data, call, source)  # a copy, or ERR_TRUNCATE
    else:
        spec.raw = data


@unpacking_class(("Gatherv", "Scatterv", "Allgatherv", "Alltoallv", "Alltoallw"))
class VectorCollectives:
    """Mixin of Comm: Gatherv, Scatterv, Allgatherv, Alltoallv, Alltoallw."""

    def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Root's ``recvbuf`` gets rank ``j``'s ``sendbuf`` as its block ``j``."""
        st, sc = self._coll()
        root = self._root(st, root, "Gatherv")
        recv = parse_vector(recvbuf, writable=True, blocks=st.size, what="recvbuf") if st.rank == root else None
        if recv is not None and is_in_place(sendbuf):
            data = recv.block(st.rank).copy()
        else:
            data = parse(sendbuf, writable=False, what="sendbuf").raw
        lengths = sc.allgather(np.int64(data.size))
        out = sc.gather(_padded([data], int(lengths.max()))[0], root)
        if recv is not None:
            for j in range(st.size):
                _place(recv.block(j), out[j, :lengths[j]], "Gatherv", j)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Rank ``j``'s ``recvbuf`` gets block ``j`` of root's ``sendbuf``."""
        st, sc = self._coll()
        root = self._root(st, root, "Scatterv")
        recv = None if st.rank == root and is_in_place(recvbuf) else parse(recvbuf, writable=True, what="recvbuf")
        if st.rank == root:
            send = parse_vector(sendbuf, writable=False, blocks=st.size, what="sendbuf")
            blocks = [send.block(j) for j in range(st.size)]
            lengths = sc.broadcast(np.array([b.size for b in blocks], np.int64), root)
            out = sc.scatter(_padded(blocks, int(lengths.max())), root)
        else:
            lengths = sc.broadcast(None, root)
            out = sc.scatter(None, root)
        if recv is not None:
            _place(recv.raw, out[:lengths[st.rank]], "Scatterv", root)

    def Allgatherv(self, sendbuf, recvbuf) -> None:
        """Every rank's ``recvbuf`` gets rank ``j``'s ``sendbuf`` as its block ``j``."""
        st, sc = self._coll()
        recv = parse_vector(recvbuf, writable=True, blocks=st.size, what="recvbuf")
        if is_in_place(sendbuf):
            data = recv.block(st.rank).copy()
        else:
            data = parse(sendbuf, writable=False, what="sendbuf").raw
        lengths = sc.allgather(np.int64(data.size))
        out = sc.allgather(_padded([data], int(lengths.max()))[0])
        for j in range(st.size):
            _place(recv.block(j), out[j, :lengths[j]], "Allgatherv", j)

    def Alltoallv(self, sendbuf, recvbuf) -> None:
        """Block ``j`` of rank ``i``'s ``sendbuf`` becomes block ``i`` of rank
        ``j``'s ``recvbuf``."""
        st, sc = self._coll()
        recv = parse_vector(recvbuf, writable=True, blocks=st.size, what="recvbuf")
        if is_in_place(sendbuf):
            send = recv
            blocks = [recv.block(j).copy() for j in range(st.size)]
        else:
            send = parse_vector(sendbuf, writable=False, blocks=st.size, what="sendbuf")
            blocks = [send.block(j) for j in range(st.size)]
        lengths = sc.allgather(np.array([b.size for b in blocks], np.int64))  # [from, to]
        out = sc.alltoall(_padded(blocks, int(lengths.max())))
        for j in range(st.size):
            _place(recv.block(j), out[j, :lengths[j, st.rank]], "Alltoallv", j)

    def Alltoallw(self, sendbuf, recvbuf) -> None:
        """As Alltoallv, with a datatype per block and displacements in bytes."""
        st, sc = self._coll()
        in_place = is_in_place(sendbuf)
        recv = parse_w(recvbuf, st.size, writable=True, what="recvbuf", packed=in_place)
        # The send blocks are packed straight into the message (packed=False)
        send = recv if in_place else parse_w(sendbuf, st.size, writable=False, what="sendbuf", packed=False)
        lengths = sc.allgather(np.array([b.raw.size for b in send], np.int64))  # [from, to]
        message = np.empty((st.size, int(lengths.max())), np.uint8)
        for row, block in zip(message, send):
            if in_place:
                row[:block.raw.size] = block.raw
            else:
                block.pack_into(row[:block.raw.size])
            row[block.raw.size:] = 0
        out = sc.alltoall(message)
        for j in range(st.size):
            _land(recv[j], out[j, :lengths[j, st.rank]], "Alltoallw", j)
