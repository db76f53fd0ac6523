"""The nonblocking (``Ibarrier``, ``Iallreduce``, ...) and persistent
(``Barrier_init``, ``Allreduce_init``, ...) collectives of intracommunicators
(a mixin of ``Comm``).

Each call has two steps, as the point-to-point calls do: *preparing*
checks the arguments and reads the buffer specifications as the blocking
form does (and raises as it does, leaving nothing behind); *posting*
starts the schedule of ``_nbschedule`` with the buffers' contents at that
time and never raises for the call's arguments. ``I...`` prepares and posts
at once; ``..._init`` prepares and returns a persistent request whose every
``Start`` posts. The layouts are the blocking forms' (see
``_collectives``); the results are written into the receive buffers when
the request completes.
"""

from __future__ import annotations

import functools

import numpy as np

from ._buffers import BufSpec, is_in_place, parse, parse_vector, parse_w
from ._collectives import _same
from ._errors import ERR_TRUNCATE, Exception as MPIException
from ._nbschedule import EMPTY, start
from ._unpacking import deferred, repack
from ._ops import PREDEFINED, check, fold_arrays, fold_into, validate
from ._requests import Prequest

SUM = PREDEFINED["SUM"]


def _blocks(raw: np.ndarray, n: int) -> list[np.ndarray]:
    size = raw.size // n if n else 0
    return [raw[j * size:(j + 1) * size] for j in range(n)]


def _place(dest: np.ndarray, data: np.ndarray, call: str, source: int) -> None:
    if data.size != dest.size:
        raise MPIException(ERR_TRUNCATE, f"{call}: rank {source} sent {data.size} bytes for a block of "
                                         f"{dest.size} bytes")
    dest[...] = data


def _received(n: int, me: int) -> set[int]:
    """The parts a fold may overwrite: those received (all but the rank's own)."""
    return set(range(n)) - {me}


def _op_name(op) -> str:
    return getattr(op, "_key", None) or "a user op"


def _typename(datatype) -> str:
    name = datatype.Get_name() if hasattr(datatype, "Get_name") else ""
    return name or f"a datatype of {datatype.Get_size()} bytes"


def _gathered(sendbuf, recvbuf, n: int, me: int, vector: bool, call: str):
    """A gathering rank's receive blocks (one per rank) and its own bytes."""
    if vector:
        recv = parse_vector(recvbuf, writable=True, blocks=n, what="recvbuf")
        dests = [recv.block(j) for j in range(n)]
    else:
        spec = parse(recvbuf, writable=True, blocks=n, what="recvbuf")
        dests = _blocks(spec.raw, n)
    if is_in_place(sendbuf):
        return dests, dests[me]
    send = parse(sendbuf, writable=False, what="sendbuf")
    if not vector:
        _same(send, spec, call, moves=True)
    return dests, send.raw


class _Post:
    """Starts one collective (each ``Start`` of a persistent one). Buffers of
    derived datatypes the preparation parsed (``specs``, set by
    ``_deferring``) are packed again at each start (sends) and stored when it
    completes (receives)."""

    __slots__ = ("st", "call", "desc", "payloads", "finish", "specs", "incoming")

    def __init__(self, st, call, desc, payloads, finish, incoming=None):
        self.st, self.call, self.desc, self.payloads, self.finish = st, call, desc, payloads, finish
        self.incoming = incoming  # the bytes each rank sends this one, where the call fixes them
        self.specs = ()

    def __call__(self):
        for spec, writable in self.specs:
            if not writable:
                repack(spec)
        return start(self.st, self.call, self.desc, self.payloads(), self._done, self.incoming)

    def _done(self, parts) -> None:
        self.finish(parts)
        for spec, writable in self.specs:
            if writable:
                spec.store()


def _deferring(prepare):
    """Prepare a collective, keeping the derived-datatype buffers it parses for its ``_Post``."""

    @functools.wraps(prepare)
    def call(self, *args):
        with deferred() as specs:
            post = prepare(self, *args)
        post.specs = tuple(specs)
        return post

    return call


class NonblockingCollectives:
    """Mixin of Comm (see the module docstring); the class provides
    ``_st()`` and ``_root()`` (``_collectives``)."""

    # -- preparing ----------------------------------------------------------------------------
    def _nbc(self, st, call: str, signature: str, payloads, finish, incoming=None):
        """``post()`` of one collective: ``payloads()`` gives each rank's
        bytes (read at each post), ``finish(parts)`` the result;
        ``incoming[j]`` the bytes rank ``j`` sends (see ``_nbschedule.start``)."""
        base = call.removesuffix("_init")
        if base[0] == "I" and base[1].islower():
            base = base[1:].capitalize()
        return _Post(st, call, f"{base}({signature})", payloads, finish, incoming)

    @_deferring
    def _barrier(self, call):
        st = self._st()
        return self._nbc(st, call, "", lambda: [EMPTY] * st.size, lambda parts: None)

    @_deferring
    def _bcast(self, call, buf, root):
        st = self._st()
        root = self._root(st, root, call)
        raw = parse(buf, writable=st.rank != root, what="buf").raw

        def finish(parts):
            if st.rank != root:
                _place(raw, parts[root], call, root)

        payloads = (lambda: [raw] * st.size) if st.rank == root else (lambda: [EMPTY] * st.size)
        return self._nbc(st, call, f"root={root}, {raw.size} bytes", payloads, finish)

    @_deferring
    def _gather(self, call, sendbuf, recvbuf, root, vector: bool):
        st = self._st()
        root = self._root(st, root, call)
        me, n = st.rank, st.size
        if me == root:
            dests, data = _gathered(sendbuf, recvbuf, n, me, vector, call)
        else:
            data = parse(sendbuf, writable=False, what="sendbuf").raw
            dests = None

        def payloads():
            out = [EMPTY] * n
            out[root] = data
            return out

        def finish(parts):
            if dests is not None:
                for j, dest in enumerate(dests):
                    _place(dest, parts[j], call, j)

        return self._nbc(st, call, f"root={root}" + ("" if vector else f", {data.size} bytes"), payloads, finish)

    @_deferring
    def _scatter(self, call, sendbuf, recvbuf, root, vector: bool):
        st = self._st()
        root = self._root(st, root, call)
        me, n = st.rank, st.size
        dest = None if me == root and is_in_place(recvbuf) else parse(recvbuf, writable=True, what="recvbuf")
        if me == root:
            if vector:
                send = parse_vector(sendbuf, writable=False, blocks=n, what="sendbuf")
                blocks = [send.block(j) for j in range(n)]
            else:
                send = parse(sendbuf, writable=False, blocks=n, what="sendbuf")
                if dest is not None:
                    _same(send, dest, call, moves=True)
                blocks = _blocks(send.raw, n)
            nbytes = blocks[0].size if n else 0
            payloads = lambda: blocks  # noqa: E731
        else:
            nbytes = dest.raw.size
            payloads = lambda: [EMPTY] * n  # noqa: E731

        def finish(parts):
            if dest is not None:
                _place(dest.raw, parts[root], call, root)

        return self._nbc(st, call, f"root={root}" + ("" if vector else f", {nbytes} bytes"), payloads, finish)

    @_deferring
    def _allgather(self, call, sendbuf, recvbuf, vector: bool):
        st = self._st()
        n = st.size
        dests, data = _gathered(sendbuf, recvbuf, n, st.rank, vector, call)

        def finish(parts):
            for j, dest in enumerate(dests):
                _place(dest, parts[j], call, j)

        signature = "" if vector else f"{data.size} bytes"
        return self._nbc(st, call, signature, lambda: [data] * n, finish)

    @_deferring
    def _alltoall(self, call, sendbuf, recvbuf, form: str):
        st = self._st()
        n = st.size
        if form == "w":
            dests = [b.raw for b in parse_w(recvbuf, n, writable=True, what="recvbuf")]
            blocks = dests if is_in_place(sendbuf) else [b.raw for b in parse_w(sendbuf, n, writable=False,
                                                                                  what="sendbuf")]
        elif form == "v":
            recv = parse_vector(recvbuf, writable=True, blocks=n, what="recvbuf")
            dests = [recv.block(j) for j in range(n)]
            send = recv if is_in_place(sendbuf) else parse_vector(sendbuf, writable=False, blocks=n, what="sendbuf")
            blocks = [send.block(j) for j in range(n)]
        else:
            spec = parse(recvbuf, writable=True, blocks=n, what="recvbuf")
            dests = _blocks(spec.raw, n)
            if is_in_place(sendbuf):
                blocks = dests
            else:
                send = parse(sendbuf, writable=False, blocks=n, what="sendbuf")
                _same(send, spec, call, moves=True)
                blocks = _blocks(send.raw, n)

        def finish(parts):
            for j, dest in enumerate(dests):
                _place(dest, parts[j], call, j)

        signature = "" if form else f"{dests[0].size if n else 0} bytes"
        return self._nbc(st, call, signature, lambda: [np.array(b, copy=True) for b in blocks], finish)

    # -- reductions ---------------------------------------------------------------------------
    def _reduce_input(self, sendbuf, recv: BufSpec, call: str, blocks: int = 1) -> BufSpec:
        if is_in_place(sendbuf):
            return BufSpec(recv.raw, recv.datatype, recv.count * blocks)
        send = parse(sendbuf, writable=False, blocks=blocks, what="sendbuf")
        _same(send, recv, call, blocks)
        return send

    @staticmethod
    def _fold(op, x: BufSpec, parts, call: str, rank: int) -> np.ndarray:
        dtype = x.typed.dtype
        return fold_arrays(op, [p.view(dtype) for p in parts], x.datatype, call, rank)

    @_deferring
    def _reduce(self, call, sendbuf, recvbuf, op, root):
        """Reduce (``root`` an int) or Allreduce (``root`` None)."""
        st = self._st()
        n, me = st.size, st.rank
        if root is not None:
            root = self._root(st, root, call)
        recv = None
        if root is None or me == root:
            recv = parse(recvbuf, writable=True, what="recvbuf")
            x = self._reduce_input(sendbuf, recv, call)
        else:
            x = parse(sendbuf, writable=False, what="sendbuf")
        op = check(op, call)
        validate(op, x.datatype, call, me)

        def payloads():
            if root is None:
                return [x.raw] * n
            out = [EMPTY] * n
            out[root] = x.raw
            return out

        def finish(parts):
            if recv is not None:
                fold_into(op, parts, recv.raw, x.datatype, call, me, _received(n, me))

        signature = (f"root={root}, " if root is not None else "") + \
            f"count={x.count}, {_typename(x.datatype)}, op={_op_name(op)}"
        return self._nbc(st, call, signature, payloads, finish, [x.raw.size if recv is not None else 0] * n)

    @_deferring
    def _reduce_scatter_block(self, call, sendbuf, recvbuf, op):
        st = self._st()
        n, me = st.size, st.rank
        if is_in_place(sendbuf):
            recv = parse(recvbuf, writable=True, blocks=n, what="recvbuf")
            x = BufSpec(recv.raw, recv.datatype, recv.count * n)
            dest = _blocks(recv.raw, n)[0]
        else:
            recv = parse(recvbuf, writable=True, what="recvbuf")
            x = parse(sendbuf, writable=False, blocks=n, what="sendbuf")
            _same(x, recv, call, n)
            dest = recv.raw
        op = check(op, call)
        validate(op, x.datatype, call, me)

        def finish(parts):
            fold_into(op, parts, dest, x.datatype, call, me, _received(n, me))

        signature = f"count={x.count // n if n else 0}, {_typename(x.datatype)}, op={_op_name(op)}"
        return self._nbc(st, call, signature, lambda: [np.array(b, copy=True) for b in _blocks(x.raw, n)], finish,
                         [x.raw.size // n] * n)

    @_deferring
    def _reduce_scatter(self, call, sendbuf, recvbuf, recvcounts, op):
        st = self._st()
        n, me = st.size, st.rank
        recv = parse(recvbuf, writable=True, what="recvbuf")
        in_place = is_in_place(sendbuf)
        if recvcounts is None:
            if in_place:
                raise ValueError(f"{call}: with MPI.IN_PLACE, pass recvcounts")
            counts = None
        else:
            counts = [int(c) for c in recvcounts]
            if len(counts) != n:
                raise ValueError(f"{call}: expecting {n} items in recvcounts, got {len(counts)}")
        if in_place:
            if recv.count != sum(counts):
                raise ValueError(f"{call}: mismatch in receive count {recv.count} and sum(counts) {sum(counts)}")
            x = BufSpec(recv.raw, recv.datatype, recv.count)
        else:
            x = parse(sendbuf, writable=False, what="sendbuf")
            if x.datatype != recv.datatype:
                raise ValueError(f"{call}: mismatch in send and receive MPI datatypes")
            if counts is not None and x.count != sum(counts):
                raise ValueError(f"{call}: mismatch in send count {x.count} and sum(counts) {sum(counts)}")
            if counts is not None and recv.count != counts[me]:
                raise ValueError(f"{call}: mismatch in receive count {recv.count} and counts[{me}] {counts[me]}")
        op = check(op, call)
        validate(op, x.datatype, call, me)
        size = x.datatype.Get_size()
        mine = recv.count if counts is None else counts[me]

        def payloads():  # each rank's receive count, then the whole buffer
            return [np.concatenate([np.array([mine], np.int64).view(np.uint8), x.raw])] * n

        def finish(parts):
            got = [int(p[:8].view(np.int64)[0]) for p in parts]
            start_ = sum(got[:me]) * size
            if sum(got) != x.count:
                raise MPIException(ERR_TRUNCATE, f"{call}: the receive counts add up to {sum(got)}, "
                                                 f"the send buffer holds {x.count} elements")
            out = self._fold(op, x, [p[8:] for p in parts], call, me).view(np.uint8)
            recv.raw[:mine * size] = out[start_:start_ + mine * size]

        signature = f"count={x.count}, {_typename(x.datatype)}, op={_op_name(op)}"
        return self._nbc(st, call, signature, payloads, finish, [8 + x.raw.size] * n)

    @_deferring
    def _scan(self, call, sendbuf, recvbuf, op, inclusive: bool):
        st = self._st()
        n, me = st.size, st.rank
        recv = parse(recvbuf, writable=True, what="recvbuf")
        x = self._reduce_input(sendbuf, recv, call)
        op = check(op, call)
        validate(op, x.datatype, call, me)
        upto = me + 1 if inclusive else me

        def payloads():
            return [x.raw if j >= me else EMPTY for j in range(n)]

        def finish(parts):
            if upto:  # Exscan leaves rank 0's recvbuf as it was, as MPI does
                fold_into(op, parts[:upto], recv.raw, x.datatype, call, me, _received(n, me))

        signature = f"count={x.count}, {_typename(x.datatype)}, op={_op_name(op)}"
        return self._nbc(st, call, signature, payloads, finish, [x.raw.size if j <= me else 0 for j in range(n)])

    # -- the calls ----------------------------------------------------------------------------
    def Ibarrier(self):
        """A request that completes once every rank has called Ibarrier."""
        return self._barrier("Ibarrier")()

    def Ibcast(self, buf, root: int = 0):
        return self._bcast("Ibcast", buf, root)()

    def Igather(self, sendbuf, recvbuf, root: int = 0):
        return self._gather("Igather", sendbuf, recvbuf, root, False)()

    def Igatherv(self, sendbuf, recvbuf, root: int = 0):
        return self._gather("Igatherv", sendbuf, recvbuf, root, True)()

    def Iscatter(self, sendbuf, recvbuf, root: int = 0):
        return self._scatter("Iscatter", sendbuf, recvbuf, root, False)()

    def Iscatterv(self, sendbuf, recvbuf, root: int = 0):
        return self._scatter("Iscatterv", sendbuf, recvbuf, root, True)()

    def Iallgather(self, sendbuf, recvbuf):
        return self._allgather("Iallgather", sendbuf, recvbuf, False)()

    def Iallgatherv(self, sendbuf, recvbuf):
        return self._allgather("Iallgatherv", sendbuf, recvbuf, True)()

    def Ialltoall(self, sendbuf, recvbuf):
        return self._alltoall("Ialltoall", sendbuf, recvbuf, "")()

    def Ialltoallv(self, sendbuf, recvbuf):
        return self._alltoall("Ialltoallv", sendbuf, recvbuf, "v")()

    def Ialltoallw(self, sendbuf, recvbuf):
        return self._alltoall("Ialltoallw", sendbuf, recvbuf, "w")()

    def Ireduce(self, sendbuf, recvbuf, op=SUM, root: int = 0):
        return self._reduce("Ireduce", sendbuf, recvbuf, op, root)()

    def Iallreduce(self, sendbuf, recvbuf, op=SUM):
        return self._reduce("Iallreduce", sendbuf, recvbuf, op, None)()

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
        return self._reduce_scatter_block("Ireduce_scatter_block", sendbuf, recvbuf, op)()

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM):
        return self._reduce_scatter("Ireduce_scatter", sendbuf, recvbuf, recvcounts, op)()

    def Iscan(self, sendbuf, recvbuf, op=SUM):
        return self._scan("Iscan", sendbuf, recvbuf, op, True)()

    def Iexscan(self, sendbuf, recvbuf, op=SUM):
        return self._scan("Iexscan", sendbuf, recvbuf, op, False)()

    # -- persistent -----------------------------------------------------------------------------
    def Barrier_init(self, info=None):
        """A persistent Barrier: each ``Start`` runs it once more."""
        return Prequest(_start=self._barrier("Barrier_init"))

    def Bcast_init(self, buf, root: int = 0, info=None):
        return Prequest(_start=self._bcast("Bcast_init", buf, root))

    def Gather_init(self, sendbuf, recvbuf, root: int = 0, info=None):
        return Prequest(_start=self._gather("Gather_init", sendbuf, recvbuf, root, False))

    def Gatherv_init(self, sendbuf, recvbuf, root: int = 0, info=None):
        return Prequest(_start=self._gather("Gatherv_init", sendbuf, recvbuf, root, True))

    def Scatter_init(self, sendbuf, recvbuf, root: int = 0, info=None):
        return Prequest(_start=self._scatter("Scatter_init", sendbuf, recvbuf, root, False))

    def Scatterv_init(self, sendbuf, recvbuf, root: int = 0, info=None):
        return Prequest(_start=self._scatter("Scatterv_init", sendbuf, recvbuf, root, True))

    def Allgather_init(self, sendbuf, recvbuf, info=None):
        return Prequest(_start=self._allgather("Allgather_init", sendbuf, recvbuf, False))

    def Allgatherv_init(self, sendbuf, recvbuf, info=None):
        return Prequest(_start=self._allgather("Allgatherv_init", sendbuf, recvbuf, True))

    def Alltoall_init(self, sendbuf, recvbuf, info=None):
        return Prequest(_start=self._alltoall("Alltoall_init", sendbuf, recvbuf, ""))

    def Alltoallv_init(self, sendbuf, recvbuf, info=None):
        return Prequest(_start=self._alltoall("Alltoallv_init", sendbuf, recvbuf, "v"))

    def Alltoallw_init(self, sendbuf, recvbuf, info=None):
        return Prequest(_start=self._alltoall("Alltoallw_init", sendbuf, recvbuf, "w"))

    def Reduce_init(self, sendbuf, recvbuf, op=SUM, root: int = 0, info=None):
        return Prequest(_start=self._reduce("Reduce_init", sendbuf, recvbuf, op, root))

    def Allreduce_init(self, sendbuf, recvbuf, op=SUM, info=None):
        return Prequest(_start=self._reduce("Allreduce_init", sendbuf, recvbuf, op, None))

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op=SUM, info=None):
        return Prequest(_start=self._reduce_scatter_block("Reduce_scatter_block_init", sendbuf, recvbuf, op))

    def Reduce_scatter_init(self, sendbuf, recvbuf, recvcounts=None, op=SUM, info=None):
        return Prequest(_start=self._reduce_scatter("Reduce_scatter_init", sendbuf, recvbuf, recvcounts, op))

    def Scan_init(self, sendbuf, recvbuf, op=SUM, info=None):
        return Prequest(_start=self._scan("Scan_init", sendbuf, recvbuf, op, True))

    def Exscan_init(self, sendbuf, recvbuf, op=SUM, info=None):
        return Prequest(_start=self._scan("Exscan_init", sendbuf, recvbuf, op, False))
