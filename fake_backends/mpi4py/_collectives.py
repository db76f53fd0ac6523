"""The buffer collectives of the stand-in's communicators (uppercase API).

Each call parses its buffers as mpi4py does (``_buffers``) and runs one
collective of the rank's SimComm, whose first phase compares the calls of
all ranks: a rank that calls another collective, or passes another count,
datatype, op or root, makes every rank raise ``simdist.CollectiveMismatch``
instead of hanging or mixing data. The layouts are MPI's: Gather's receive
buffer holds ``size`` blocks in rank order, Scatter's send buffer likewise,
Alltoall's block ``j`` goes to (comes from) rank ``j``, Reduce_scatter_block
leaves block ``rank`` of the reduction on rank ``rank``. ``MPI.IN_PLACE``
(or None) is accepted where MPI allows it. Reductions are the rank-order
fold (see ``_ops``); Scan and Exscan gather every rank's buffer, a chunk
at a time, and fold the prefix, which gives the same bits as Allreduce on
the last rank. A reduction the simulator's own collectives cannot do (a
user op, ...) is folded chunk by chunk into the receive buffer
(``_fold_chunks``), so it holds one gathered chunk beside the buffers.
"""

from __future__ import annotations

import numpy as np

from simdist._arguments import DTYPE_CODE

from ._buffers import BufSpec, is_in_place, parse
from ._nbschedule import Counted
from ._ops import PREDEFINED, Spread, check, fold_into, mpibuf, simdist_op, store_bytes, validate
from ._pointtopoint import c_int
from ._unpacking import check_signatures, unpacking_class

SUM = PREDEFINED["SUM"]
#: The bytes of all ranks' buffers one gather of a folded reduction moves
#: (``_fold_chunks``): the memory such a reduction takes beside the buffers.
FOLD_CHUNK = 8 << 20


def _put(raw: np.ndarray, out: np.ndarray) -> None:
    """Copy the bytes of ``out`` (a new contiguous array) into ``raw``."""
    if raw.size:
        raw[...] = out.reshape(-1).view(np.uint8)


def _blocks(x: np.ndarray, n: int) -> np.ndarray:
    """``x`` as ``n`` rows (also when it is empty)."""
    return x.reshape(n, x.size // n)


def _wire(raw: np.ndarray, datatype) -> np.ndarray:
    """What a simdist collective carries for these bytes: typed elements
    where the contract has the dtype, else the bytes themselves."""
    dtype = datatype.dtype
    return raw.view(dtype) if dtype in DTYPE_CODE else raw


def _same(send: BufSpec, recv: BufSpec, call: str, blocks: int = 1, moves: bool = False) -> None:
    """mpi4py's checks of a send and a receive buffer that must agree. A
    call that only ``moves`` data with a derived datatype on either side
    needs the same type signature instead (MPI's rule: a vector of 4
    doubles matches 4 MPI.DOUBLE)."""
    if moves and (send.datatype._is_derived() or recv.datatype._is_derived()):
        check_signatures(send.datatype, send.count, recv.datatype, recv.count, call)
        return
    if send.datatype != recv.datatype:
        raise ValueError(f"{call}: mismatch in send and receive MPI datatypes")
    if send.count != recv.count:
        raise ValueError(f"{call}: mismatch in send count {send.count} and receive count {recv.count * blocks}")


def _fold_in_turn(sc, chunk: np.ndarray, op, datatype, rank: int, dest: np.ndarray | None, ranks: int | None,
                  cut: tuple[int, int]) -> None:
    """Fold bytes ``cut`` of every rank's ``chunk`` (of ranks ``0..ranks-1``;
    all: None) into ``dest`` (None: this rank keeps nothing) with a user
    op, each rank's chunk broadcast in turn: beside its buffers a rank holds
    the running result and the chunk that came last, or only one of them
    where its own chunk is the running result's place (``dest`` itself, in
    place). Each step's ``inoutbuf`` is the later rank's operand, as in
    ``fold_into``; the rank's own operand is read from its buffer."""
    upto = sc.size if ranks is None else ranks
    acc = None
    for j in range(sc.size):
        part = sc.broadcast_from(chunk if j == rank else None, j)
        if dest is None or j >= upto:
            continue
        part = chunk[cut[0]:cut[1]] if j == rank else part[cut[0]:cut[1]]
        if acc is None:
            acc = part
            continue
        if j == rank:  # the rank's own operand, sent already: dest becomes it, unless it is dest
            target = dest
            store_bytes(dest, part)
        else:
            target = part
        op._function(mpibuf(acc), mpibuf(target), datatype)
        acc = target
    if acc is not None:
        store_bytes(dest, acc)


def _check_sizes(sizes: np.ndarray, rank: int, call: str) -> None:
    """Raise ``CollectiveMismatch`` unless every rank's buffer has this rank's size (bytes)."""
    from simdist import CollectiveMismatch

    mine = int(sizes[rank])
    for j, theirs in enumerate(sizes.tolist()):
        if theirs != mine:
            raise CollectiveMismatch(
                f"rank {rank}: {call} of {mine} bytes met rank {j}'s {call} of {theirs} bytes; every rank must "
                "pass the same count", {rank: f"{call}({mine} bytes)", j: f"{call}({theirs} bytes)"})


@unpacking_class(("Bcast", "Gather", "Scatter", "Allgather", "Alltoall", "Reduce", "Allreduce",
                  "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan"))
class BufferCollectives:
    """Mixin of Comm: Barrier, Bcast, Gather, Scatter, Allgather, Alltoall,
    Reduce, Allreduce, Reduce_scatter_block, Reduce_scatter, Scan, Exscan."""

    def _coll(self):
        """The rank's state and SimComm, after a step of p2p progress."""
        st = self._st()
        st.engine.progress()
        return st, Counted(st)  # blocking and nonblocking collectives match in one order

    def _root(self, st, root, call) -> int:
        from ._errors import ERR_ROOT, Exception as MPIException

        root = c_int(root, "root")
        if not 0 <= root < st.size:
            raise MPIException(ERR_ROOT, f"{call}: root={root!r} on {st.name} of {st.size} ranks")
        return root

    def Barrier(self) -> None:
        """Return once every rank of the communicator has called it."""
        self._coll()[1].barrier()

    def Bcast(self, buf, root: int = 0) -> None:
        """Copy root's ``buf`` into every rank's ``buf``."""
        st, sc = self._coll()
        root = self._root(st, root, "Bcast")
        spec = parse(buf, writable=st.rank != root, what="buf")
        x = _wire(spec.raw, spec.datatype)
        out = sc.broadcast(x, root)
        if st.rank != root:
            _put(spec.raw, out)

    def Gather(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Root's ``recvbuf`` gets every rank's ``sendbuf``, in rank order."""
        st, sc = self._coll()
        root = self._root(st, root, "Gather")
        if st.rank == root:
            recv = parse(recvbuf, writable=True, blocks=st.size, what="recvbuf")
            block = _blocks(recv.raw, st.size)[st.rank]
            if is_in_place(sendbuf):
                x = _wire(block, recv.datatype).copy()
            else:
                send = parse(sendbuf, writable=False, what="sendbuf")
                _same(send, recv, "Gather", moves=True)
                x = _wire(send.raw, send.datatype)
            _put(recv.raw, sc.gather(x, root))
        else:
            send = parse(sendbuf, writable=False, what="sendbuf")
            sc.gather(_wire(send.raw, send.datatype), root)

    def Scatter(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Rank ``r``'s ``recvbuf`` gets block ``r`` of root's ``sendbuf``."""
        from ._errors import ERR_TRUNCATE, Exception as MPIException

        st, sc = self._coll()
        root = self._root(st, root, "Scatter")
        if st.rank == root:
            send = parse(sendbuf, writable=False, blocks=st.size, what="sendbuf")
            recv = None
            if not is_in_place(recvbuf):
                recv = parse(recvbuf, writable=True, what="recvbuf")
                _same(send, recv, "Scatter", moves=True)
            x = _wire(send.raw, send.datatype)
            out = sc.scatter(_blocks(x, st.size), root)
            if recv is not None:
                _put(recv.raw, out)
            return
        recv = parse(recvbuf, writable=True, what="recvbuf")
        out = sc.scatter(None, root)
        if out.nbytes != recv.raw.size:
            raise MPIException(ERR_TRUNCATE, f"Scatter: root sent {out.nbytes} bytes per rank, recvbuf holds "
                                             f"{recv.raw.size}")
        _put(recv.raw, out)

    def Allgather(self, sendbuf, recvbuf) -> None:
        """Every rank's ``recvbuf`` gets every rank's ``sendbuf``, in rank order."""
        st, sc = self._coll()
        recv = parse(recvbuf, writable=True, blocks=st.size, what="recvbuf")
        if is_in_place(sendbuf):
            x = _wire(_blocks(recv.raw, st.size)[st.rank], recv.datatype).copy()
        else:
            send = parse(sendbuf, writable=False, what="sendbuf")
            _same(send, recv, "Allgather", moves=True)
            x = _wire(send.raw, send.datatype)
        _put(recv.raw, sc.allgather(x))

    def Alltoall(self, sendbuf, recvbuf) -> None:
        """Block ``j`` of rank ``i``'s ``sendbuf`` lands in block ``i`` of rank
        ``j``'s ``recvbuf``."""
        st, sc = self._coll()
        recv = parse(recvbuf, writable=True, blocks=st.size, what="recvbuf")
        if is_in_place(sendbuf):
            x = _wire(recv.raw, recv.datatype).copy()
        else:
            send = parse(sendbuf, writable=False, blocks=st.size, what="sendbuf")
            _same(send, recv, "Alltoall", moves=True)
            x = _wire(send.raw, send.datatype)
        _put(recv.raw, sc.alltoall(_blocks(x, st.size)))

    # -- reductions -------------------------------------------------------------------
    def _reduce_input(self, sendbuf, recv: BufSpec, call: str, blocks: int = 1) -> BufSpec:
        # In place the input is the receive buffer itself: every path reads
        # a part of it (a chunk, or the whole) before it writes that part.
        if is_in_place(sendbuf):
            return BufSpec(recv.raw, recv.datatype, recv.count * blocks)
        send = parse(sendbuf, writable=False, blocks=blocks, what="sendbuf")
        _same(send, recv, call, blocks)
        return send

    def _reduction(self, st, sc, x: BufSpec, op, root: int | None, call: str, dest: np.ndarray | None,
                   span: tuple[int, int] | None = None) -> None:
        """Store bytes ``span`` (all: None) of the rank-order reduction of
        every rank's ``x`` with ``op`` into ``dest`` on ``root`` (every rank
        when None)."""
        op = check(op, call)
        name = simdist_op(op)
        typed = x.typed
        if name is not None and typed.dtype in DTYPE_CODE:
            out = sc.allreduce(typed, name) if root is None else sc.reduce(typed, root, name)
            if dest is not None:
                _put(dest, out.reshape(-1).view(np.uint8)[slice(*span) if span else slice(None)])
            return
        validate(op, x.datatype, call, st.rank)
        self._fold_chunks(sc, x, op, call, st.rank, dest, root, span=span)

    def _fold_chunks(self, sc, x: BufSpec, op, call: str, rank: int, dest: np.ndarray | None,
                     root: int | None = None, ranks: int | None = None, span: tuple[int, int] | None = None):
        """The reductions simdist's own cannot do (see ``_ops``): gather
        every rank's ``x`` a chunk at a time (at ``root``; everywhere when
        None) and fold the chunk's parts of ranks ``0..ranks-1`` (all: None)
        into ``dest``, which holds bytes ``span`` of the result (all: None).
        Beside the buffers a rank holds one gathered chunk of every rank,
        ``FOLD_CHUNK`` bytes in all, however large the buffers.

        A user op on a derived datatype is called on whole elements of it.
        Where one element is larger than a rank's share of a chunk (a
        library's large count as one element of a vector-and-remainder
        type), the ranks' chunks come one rank at a time instead
        (``_fold_in_turn``), so a rank holds two chunks at most.

        Ranks whose sizes differ must not pair one's chunks with another's
        next call: in one gather the simulator compares the sizes; before
        several, the ranks compare them here."""
        raw, size = x.raw, sc.size
        derived = op._function is not None and x.datatype._is_derived()
        item = max(1, x.datatype.Get_size() if derived else x.typed.dtype.itemsize)
        per = max(item, FOLD_CHUNK // size // item * item)
        in_turn = per > FOLD_CHUNK // size and Spread.of(x.datatype, item) is None
        lo, hi = span if span else (0, raw.size)
        bounds = [0, *range(min(per, raw.size), raw.size, per), raw.size]
        if len(bounds) > 2 or in_turn:
            _check_sizes(sc.allgather(np.int64(raw.size)), rank, call)
        for a, b in zip(bounds, bounds[1:]):
            c, d = max(a, lo), min(b, hi)
            folds = (root is None or rank == root) and ranks != 0 and (c < d or a == b)
            if in_turn:
                _fold_in_turn(sc, raw[a:b], op, x.datatype, rank, dest[c - lo:d - lo] if folds else None,
                              ranks, (c - a, d - a))
                continue
            parts = sc.allgather(raw[a:b]) if root is None else sc.gather(raw[a:b], root)
            if folds:
                fold_into(op, [p[c - a:d - a] for p in parts[:ranks]], dest[c - lo:d - lo], x.datatype, call, rank)

    def Reduce(self, sendbuf, recvbuf, op=SUM, root: int = 0) -> None:
        """Root's ``recvbuf`` gets the reduction of every rank's ``sendbuf``."""
        st, sc = self._coll()
        root = self._root(st, root, "Reduce")
        if st.rank == root:
            recv = parse(recvbuf, writable=True, what="recvbuf")
            self._reduction(st, sc, self._reduce_input(sendbuf, recv, "Reduce"), op, root, "Reduce", recv.raw)
        else:
            send = parse(sendbuf, writable=False, what="sendbuf")
            self._reduction(st, sc, send, op, root, "Reduce", None)

    def Allreduce(self, sendbuf, recvbuf, op=SUM) -> None:
        """Every rank's ``recvbuf`` gets the reduction of every rank's ``sendbuf``."""
        st, sc = self._coll()
        recv = parse(recvbuf, writable=True, what="recvbuf")
        x = self._reduce_input(sendbuf, recv, "Allreduce")
        self._reduction(st, sc, x, op, None, "Allreduce", recv.raw)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM) -> None:
        """Rank ``r``'s ``recvbuf`` gets block ``r`` of the reduction of every
        rank's ``sendbuf`` (``size`` blocks)."""
        st, sc = self._coll()
        call = "Reduce_scatter_block"
        if is_in_place(sendbuf):
            recv = parse(recvbuf, writable=True, blocks=st.size, what="recvbuf")
            x = BufSpec(recv.raw, recv.datatype, recv.count * st.size)
            dest = _blocks(recv.raw, st.size)[0]
        else:
            recv = parse(recvbuf, writable=True, what="recvbuf")
            x = parse(sendbuf, writable=False, blocks=st.size, what="sendbuf")
            _same(x, recv, call, st.size)
            dest = recv.raw
        op = check(op, call)
        name = simdist_op(op)
        typed = x.typed
        if name is not None and typed.dtype in DTYPE_CODE:
            _put(dest, sc.reduce_scatter(_blocks(typed, st.size), name))
        else:
            self._reduction(st, sc, x, op, None, call, dest, (st.rank * dest.size, (st.rank + 1) * dest.size))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM) -> None:
        """Rank ``r``'s ``recvbuf`` gets ``recvcounts[r]`` elements of the
        reduction, from offset ``sum(recvcounts[:r])``."""
        st, sc = self._coll()
        call = "Reduce_scatter"
        recv = parse(recvbuf, writable=True, what="recvbuf")
        in_place = is_in_place(sendbuf)
        if recvcounts is None:
            if in_place:
                raise ValueError(f"{call}: with MPI.IN_PLACE, pass recvcounts")
            counts = [int(c) for c in sc.allgather(np.int64(recv.count))]
        else:
            counts = [int(c) for c in recvcounts]
            if len(counts) != st.size:
                raise ValueError(f"{call}: expecting {st.size} items in recvcounts, got {len(counts)}")
        total, start = sum(counts), sum(counts[:st.rank])
        if in_place:
            if recv.count != total:
                raise ValueError(f"{call}: mismatch in receive count {recv.count} and sum(counts) {total}")
            x = BufSpec(recv.raw, recv.datatype, total)
        else:
            x = parse(sendbuf, writable=False, what="sendbuf")
            if x.datatype != recv.datatype:
                raise ValueError(f"{call}: mismatch in send and receive MPI datatypes")
            if x.count != total:
                raise ValueError(f"{call}: mismatch in send count {x.count} and sum(counts) {total}")
            if recv.count != counts[st.rank]:
                raise ValueError(f"{call}: mismatch in receive count {recv.count} and counts[{st.rank}] "
                                 f"{counts[st.rank]}")
        size = x.datatype.Get_size()
        lo, hi = start * size, (start + counts[st.rank]) * size
        self._reduction(st, sc, x, op, None, call, recv.raw[:hi - lo], (lo, hi))

    def _prefix(self, sendbuf, recvbuf, op, call: str, inclusive: bool) -> None:
        st, sc = self._coll()
        recv = parse(recvbuf, writable=True, what="recvbuf")
        x = self._reduce_input(sendbuf, recv, call)
        op = check(op, call)
        validate(op, x.datatype, call, st.rank)
        # Exscan leaves rank 0's recvbuf as it was, as MPI does (it folds no rank)
        self._fold_chunks(sc, x, op, call, st.rank, recv.raw, ranks=st.rank + 1 if inclusive else st.rank)

    def Scan(self, sendbuf, recvbuf, op=SUM) -> None:
        """Rank ``r``'s ``recvbuf`` gets the reduction over ranks ``0..r``."""
        self._prefix(sendbuf, recvbuf, op, "Scan", True)

    def Exscan(self, sendbuf, recvbuf, op=SUM) -> None:
        """Rank ``r``'s ``recvbuf`` gets the reduction over ranks ``0..r-1``
        (rank 0's is left as it was)."""
        self._prefix(sendbuf, recvbuf, op, "Exscan", False)
