"""The collectives of an intercommunicator (``_intercomm``), with MPI's rules.

Data moves between the groups: in a rooted call (Bcast, Gather, Scatter,
Reduce and their lowercase and vector forms) the root passes
``MPI.ROOT``, the other processes of its group ``MPI.PROC_NULL`` (they take
no part), and the processes of the other group the root's rank in its
group; Allgather, Allreduce, Alltoall and Reduce_scatter give each process
the data of the OTHER group (an Allreduce the fold, in rank order, of the
remote group's buffers). Scan and Exscan are not defined on
intercommunicators.

Every call is made of messages of the union's ``GroupComm`` exchange,
which names the call in each message: two processes that make different
calls raise ``simdist.CollectiveMismatch`` instead of mixing data, and a
process that never calls is a hang the engine's wait reports, naming the
call.
"""

from __future__ import annotations

import numpy as np

from ._buffers import is_in_place, parse, parse_vector, parse_w
from ._errors import ERR_ROOT, ERR_TRUNCATE, Exception as MPIException
from ._locks import _comm_lock
from ._objects import _dump, _items, _load
from ._ops import PREDEFINED, check, fold_arrays, fold_objects
from ._p2p import PROC_NULL
from ._pointtopoint import c_int
from ._unpacking import unpacking_class

ROOT = -4
SUM = PREDEFINED["SUM"]


@unpacking_class(("Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
                 "Alltoallv", "Alltoallw", "Allreduce", "Reduce", "Reduce_scatter_block", "Reduce_scatter"))
class InterCollectives:
    """Mixin of Intercomm: the collectives of both APIs (see the module docstring)."""

    # -- the exchange --------------------------------------------------------------------
    def _exchange(self, call: str, outgoing: dict, sources) -> dict:
        """Send ``outgoing[remote rank]``, receive from each remote rank of
        ``sources``; what was received, by remote rank."""
        st = self._st()
        st.engine.progress()
        off = st.remote_offset
        got = st.sc._exchange(call, {off + r: obj for r, obj in outgoing.items()}, [off + r for r in sources])
        return {u - off: obj for u, obj in got.items()}

    def _remote(self):
        return range(len(self._st().members))

    def _role(self, root, call: str) -> tuple[str, int]:
        """"root", "idle" (PROC_NULL) or "leaf" (the other group's
        processes), and ``root`` as mpi4py converts a C int (True is 1)."""
        st = self._st()
        root = c_int(root, "root")
        if root == ROOT:
            return "root", root
        if root == PROC_NULL:
            return "idle", root
        if 0 <= root < len(st.members):
            return "leaf", root
        raise MPIException(ERR_ROOT, f"{call}: root={root!r} on the intercommunicator {st.name} (MPI.ROOT, "
                           f"MPI.PROC_NULL or a rank of the remote group of {len(st.members)})")

    @staticmethod
    def _put(raw: np.ndarray, data: np.ndarray, call: str) -> None:
        if data.size != raw.size:
            raise MPIException(ERR_TRUNCATE, f"{call}: received {data.size} bytes into a buffer of {raw.size}")
        raw[...] = data

    # -- buffers -----------------------------------------------------------------------
    def Barrier(self) -> None:
        self._exchange("Barrier", dict.fromkeys(self._remote()), self._remote())

    def Bcast(self, buf, root: int = 0) -> None:
        role, root = self._role(root, "Bcast")
        if role == "root":
            data = parse(buf, writable=False, what="buf").raw.copy()
            self._exchange("Bcast", dict.fromkeys(self._remote(), data), ())
        elif role == "leaf":
            spec = parse(buf, writable=True, what="buf")
            self._put(spec.raw, self._exchange("Bcast", {}, (root,))[root], "Bcast")

    def Gather(self, sendbuf, recvbuf, root: int = 0) -> None:
        self._gather("Gather", sendbuf, recvbuf, root, False)

    def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        self._gather("Gatherv", sendbuf, recvbuf, root, True)

    def _gather(self, call, sendbuf, recvbuf, root, vector: bool) -> None:
        role, root = self._role(root, call)
        if role == "leaf":
            self._exchange(call, {root: parse(sendbuf, writable=False, what="sendbuf").raw.copy()}, ())
        elif role == "root":
            recv = self._recv_blocks(recvbuf, vector)
            got = self._exchange(call, {}, self._remote())
            for r in self._remote():
                self._put(recv.block(r), got[r], call)

    def _recv_blocks(self, recvbuf, vector: bool):
        n = len(self._st().members)
        if vector:
            return parse_vector(recvbuf, writable=True, blocks=n, what="recvbuf")
        return _Blocks(parse(recvbuf, writable=True, blocks=n, what="recvbuf").raw, n)

    def _send_blocks(self, sendbuf, vector: bool):
        n = len(self._st().members)
        if vector:
            return parse_vector(sendbuf, writable=False, blocks=n, what="sendbuf")
        return _Blocks(parse(sendbuf, writable=False, blocks=n, what="sendbuf").raw, n)

    def Scatter(self, sendbuf, recvbuf, root: int = 0) -> None:
        self._scatter("Scatter", sendbuf, recvbuf, root, False)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0) -> None:
        self._scatter("Scatterv", sendbuf, recvbuf, root, True)

    def _scatter(self, call, sendbuf, recvbuf, root, vector: bool) -> None:
        role, root = self._role(root, call)
        if role == "root":
            send = self._send_blocks(sendbuf, vector)
            self._exchange(call, {r: send.block(r).copy() for r in self._remote()}, ())
        elif role == "leaf":
            recv = parse(recvbuf, writable=True, what="recvbuf")
            self._put(recv.raw, self._exchange(call, {}, (root,))[root], call)

    def Allgather(self, sendbuf, recvbuf) -> None:
        self._allgather("Allgather", sendbuf, recvbuf, False)

    def Allgatherv(self, sendbuf, recvbuf) -> None:
        self._allgather("Allgatherv", sendbuf, recvbuf, True)

    def _allgather(self, call, sendbuf, recvbuf, vector: bool) -> None:
        data = parse(sendbuf, writable=False, what="sendbuf").raw.copy()
        recv = self._recv_blocks(recvbuf, vector)
        got = self._exchange(call, dict.fromkeys(self._remote(), data), self._remote())
        for r in self._remote():
            self._put(recv.block(r), got[r], call)

    def Alltoall(self, sendbuf, recvbuf) -> None:
        self._alltoall("Alltoall", sendbuf, recvbuf, False)

    def Alltoallv(self, sendbuf, recvbuf) -> None:
        self._alltoall("Alltoallv", sendbuf, recvbuf, True)

    def _alltoall(self, call, sendbuf, recvbuf, vector: bool) -> None:
        send = self._send_blocks(sendbuf, vector)
        recv = self._recv_blocks(recvbuf, vector)
        got = self._exchange(call, {r: send.block(r).copy() for r in self._remote()}, self._remote())
        for r in self._remote():
            self._put(recv.block(r), got[r], call)

    def Alltoallw(self, sendbuf, recvbuf) -> None:
        """As Alltoallv, with a datatype per block and displacements in bytes."""
        n = len(self._st().members)
        send = parse_w(sendbuf, n, writable=False, what="sendbuf")
        recv = parse_w(recvbuf, n, writable=True, what="recvbuf")
        got = self._exchange("Alltoallw", {r: send[r].raw.copy() for r in self._remote()}, self._remote())
        for r in self._remote():
            self._put(recv[r].raw, got[r], "Alltoallw")

    def _typed(self, spec, parts: list, op, call: str) -> np.ndarray:
        """The rank-order fold of the remote group's ``parts`` (bytes) as ``spec``'s elements."""
        dtype = spec.datatype.dtype
        return fold_arrays(op, [p.view(dtype) for p in parts], spec.datatype, call, self._st().rank)

    def Allreduce(self, sendbuf, recvbuf, op=SUM) -> None:
        op = check(op, "Allreduce")
        recv = parse(recvbuf, writable=True, what="recvbuf")
        send = recv if is_in_place(sendbuf) else parse(sendbuf, writable=False, what="sendbuf")
        got = self._exchange("Allreduce", dict.fromkeys(self._remote(), send.raw.copy()), self._remote())
        out = self._typed(recv, [got[r] for r in self._remote()], op, "Allreduce")
        self._put(recv.raw, out.view(np.uint8).reshape(-1), "Allreduce")

    def Reduce(self, sendbuf, recvbuf, op=SUM, root: int = 0) -> None:
        op = check(op, "Reduce")
        role, root = self._role(root, "Reduce")
        if role == "leaf":
            self._exchange("Reduce", {root: parse(sendbuf, writable=False, what="sendbuf").raw.copy()}, ())
        elif role == "root":
            recv = parse(recvbuf, writable=True, what="recvbuf")
            got = self._exchange("Reduce", {}, self._remote())
            out = self._typed(recv, [got[r] for r in self._remote()], op, "Reduce")
            self._put(recv.raw, out.view(np.uint8).reshape(-1), "Reduce")

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM) -> None:
        """The fold of the remote group's buffers, block ``rank`` of it on each process."""
        op = check(op, "Reduce_scatter_block")
        st = self._st()
        recv = parse(recvbuf, writable=True, what="recvbuf")
        n = len(st.members)
        send = _Blocks(parse(sendbuf, writable=False, blocks=n, what="sendbuf").raw, n)
        got = self._exchange("Reduce_scatter_block", {r: send.block(r).copy() for r in self._remote()},
                             self._remote())
        out = self._typed(recv, [got[r] for r in self._remote()], op, "Reduce_scatter_block")
        self._put(recv.raw, out.view(np.uint8).reshape(-1), "Reduce_scatter_block")

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM) -> None:
        """The fold of the remote group's buffers, scattered over this group:
        ``recvcounts[rank]`` elements from the offset of the lower ranks'
        counts. MPI has both groups' counts sum to the same; each process
        tells the remote group its count, so each sender cuts its buffer in
        those (a wrong sum raises there, never misplaces data)."""
        call = "Reduce_scatter"
        op = check(op, call)
        st = self._st()
        if recvcounts is None:
            raise TypeError(f"{call}: an intercommunicator needs recvcounts (one count per rank of this group)")
        counts = [int(c) for c in recvcounts]
        if len(counts) != st.size:
            raise ValueError(f"{call}: expecting {st.size} items in recvcounts, got {len(counts)}")
        recv = parse(recvbuf, writable=True, what="recvbuf")
        send = parse(sendbuf, writable=False, what="sendbuf")
        if send.count != sum(counts):
            raise ValueError(f"{call}: mismatch in send count {send.count} and sum(counts) {sum(counts)}")
        remote = self._exchange(call, dict.fromkeys(self._remote(), counts[st.rank]), self._remote())
        if sum(remote.values()) != send.count:
            raise ValueError(f"{call}: the remote group's recvcounts sum to {sum(remote.values())}, this "
                             f"group's to {send.count}; MPI has them equal")
        size, start, blocks = send.datatype.Get_size(), 0, {}
        for r in self._remote():
            blocks[r] = send.raw[start * size:(start + remote[r]) * size].copy()
            start += remote[r]
        got = self._exchange(call, blocks, self._remote())
        out = self._typed(recv, [got[r] for r in self._remote()], op, call)
        self._put(recv.raw[:counts[st.rank] * size], out.view(np.uint8).reshape(-1), call)

    # -- objects -----------------------------------------------------------------------
    # As in ``_objects``: objects are pickled before the lock of the call's
    # name is taken and unpickled after it is let go, as mpi4py does.
    def barrier(self) -> None:
        self.Barrier()

    def bcast(self, obj, root: int = 0):
        """The remote root's object on the leaves; None on the root and the idle."""
        role, root = self._role(root, "bcast")
        if role == "root":
            data = _dump(obj)
            with _comm_lock(self, "bcast"):
                self._exchange("bcast", dict.fromkeys(self._remote(), data), ())
        elif role == "leaf":
            with _comm_lock(self, "bcast"):
                data = self._exchange("bcast", {}, (root,))[root]
            return _load(data)
        return None

    def gather(self, sendobj, root: int = 0):
        return self._gather_objects("gather", sendobj, root)

    def _gather_objects(self, call: str, sendobj, root):
        role, root = self._role(root, call)
        if role == "leaf":
            data = _dump(sendobj)
            with _comm_lock(self, "gather"):
                self._exchange(call, {root: data}, ())
        elif role == "root":
            with _comm_lock(self, "gather"):
                got = self._exchange(call, {}, self._remote())
            return [_load(got[r]) for r in self._remote()]
        return None

    def scatter(self, sendobj, root: int = 0):
        role, root = self._role(root, "scatter")
        if role == "root":
            pickles = [_dump(item) for item in _items(sendobj, len(self._remote()), "scatter")]
            with _comm_lock(self, "scatter"):
                self._exchange("scatter", dict(zip(self._remote(), pickles)), ())
        elif role == "leaf":
            with _comm_lock(self, "scatter"):
                data = self._exchange("scatter", {}, (root,))[root]
            return _load(data)
        return None

    def allgather(self, sendobj) -> list:
        return self._allgather_objects("allgather", sendobj)

    def _allgather_objects(self, call: str, sendobj) -> list:
        data = _dump(sendobj)
        with _comm_lock(self, "allgather"):
            got = self._exchange(call, dict.fromkeys(self._remote(), data), self._remote())
        return [_load(got[r]) for r in self._remote()]

    def alltoall(self, sendobj) -> list:
        pickles = [_dump(item) for item in _items(sendobj, len(self._remote()), "alltoall")]
        with _comm_lock(self, "alltoall"):
            got = self._exchange("alltoall", dict(zip(self._remote(), pickles)), self._remote())
        return [_load(got[r]) for r in self._remote()]

    def reduce(self, sendobj, op=SUM, root: int = 0):
        """``op`` folded over the remote group's objects in rank order, on the root."""
        items = self._gather_objects("reduce", sendobj, root)
        return None if items is None else fold_objects(op, items)

    def allreduce(self, sendobj, op=SUM):
        """``op`` folded over the remote group's objects in rank order."""
        return fold_objects(op, self._allgather_objects("allreduce", sendobj))


class _Blocks:
    """``n`` equal blocks of ``raw``, as a VecSpec's ``block``."""

    def __init__(self, raw: np.ndarray, n: int):
        self.raw, self.n = raw, n

    def block(self, j: int) -> np.ndarray:
        size = self.raw.size // self.n if self.n else 0
        return self.raw[j * size:(j + 1) * size]
