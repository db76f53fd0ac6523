"""The vector collectives (Gatherv, Scatterv, Allgatherv, Alltoallv, Alltoallw).

Blocks differ in length from rank to rank, and a simdist collective needs
one shape on every rank; so each call first exchanges the blocks' byte
counts with one simdist collective, then the blocks as bytes padded to the
longest with another. Both go through the rank's SimComm, so a rank that
calls something else raises ``simdist.CollectiveMismatch`` everywhere. A
block whose length differs from what its receiver expects raises
``MPI.Exception`` (``ERR_TRUNCATE``) on the receiver.

Alltoallv and Alltoallw, the transposes of parallel FFTs, never hold the
padded message: each block is packed from the buffer straight into the
rank's slot and unpacked from the sender's slot straight into the receive
buffer (``SimComm.alltoall_sized``), two copies as in MPI's shared memory,
and the blocks' lengths travel with them (one meeting, not two);
a rank's block to itself is one copy where either side is one run. A
call that repeats an earlier call's arguments (a transpose called again
and again) takes their parse from ``_argcache`` instead of parsing again.
"""

from __future__ import annotations

import numpy as np

from simdist import checks
from simdist.sim import _repeated as _compiled_path

from ._argcache import ROWS_COMPILED_UP_TO, template, vector_parts, w_parts
from ._typecalls import _MAPS
from ._buffers import BufSpec, is_in_place, parse, parse_vector
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


def _copies(blocks: list[BufSpec]) -> list[BufSpec]:
    """The blocks' packed bytes as they are now: what an in-place call sends."""
    copies = []
    for block in blocks:
        raw = np.empty(block.nbytes, np.uint8)
        block.pack_range(raw, 0)
        copies.append(BufSpec(raw, block.datatype, block.count))
    return copies


def _alltoall_blocks(st, sc, call: str, send: list[BufSpec], recv: list[BufSpec], sizes: list[int],
                     expected: list[int], send_rows=None, recv_rows=None) -> bool:
    """Block ``j`` of ``send`` (``sizes[j]`` bytes) to rank ``j``, rank
    ``j``'s block for us into block ``j`` of ``recv`` (``expected[j]``
    bytes): each packed straight into the simulator's slot and unpacked
    straight from it, the blocks' lengths travelling with them; all blocks
    in one numpy copy each way where both sides' small blocks are the rows
    of one array (``send_rows``, ``recv_rows``). A length that differs
    from its receive block's is ERR_TRUNCATE on the receiver, which then
    writes no block. Returns whether the rows moved every block."""
    pack, unpack = _movers(st.rank, send, recv)
    rows = None if send_rows is None or recv_rows is None else (send_rows, recv_rows)
    moved = []

    def own():
        _copy_block(send[st.rank], recv[st.rank])
        moved.append(True)

    got, whole = sc.alltoall_sized(sizes, pack, unpack, expected, rows, own)
    _finish(call, st.rank, send, recv, got, expected, whole or bool(moved))
    return whole


def _movers(me: int, send: list[BufSpec], recv: list[BufSpec]):
    """``alltoall_sized``'s pack and unpack of the blocks (a rank's own block moves apart)."""
    def pack(j, lo, out):
        if j != me:
            send[j].pack_range(out, lo)

    def unpack(j, lo, data):
        if j != me:
            recv[j].unpack_range(data, lo)

    return pack, unpack


def _finish(call: str, me: int, send, recv, got: list[int], expected: list[int], whole: bool) -> None:
    if got != expected:
        short = next(j for j in range(len(got)) if got[j] != expected[j])
        raise MPIException(ERR_TRUNCATE, f"{call}: rank {short} sent {got[short]} bytes for a block of "
                                         f"{expected[short]} bytes")
    if not whole:
        _copy_block(send[me], recv[me])


#: Compiled transposes a communicator keeps per call (``simdist.sim._repeated``).
REPEATS_KEPT = 4


def _repeated(st, call: str, sendbuf, recvbuf) -> bool | None:
    """True if one of the compiled transposes that ``_compile`` made for
    ``call`` on this communicator did this call (see
    ``simdist.sim._repeated``); where its meeting found a block that needs
    the Python path (a length that differs, a block longer than a row),
    that rest is done here, on a parse of the arguments. False if none has
    these arguments; None if one has, but the rank's state asks for the
    Python path (a message in flight, say)."""
    for repeated in st.repeats.get(call, {}).values():
        out = repeated(sendbuf, recvbuf)
        if out is True or out is None:
            return out
        if out is not False:
            got, longest, room = out
            (send, sizes, _), (recv, expected, _) = _parts(st, call, sendbuf, recvbuf)
            pack, unpack = _movers(st.rank, send, recv)
            if longest > room:
                st.sc.sized_phases(sizes, pack, unpack, expected, got, longest)
            _finish(call, st.rank, send, recv, got, expected, False)
            return True
    return False


#: How each call parses one of its buffer arguments: (blocks, their lengths, their rows or None).
_PARSE = {"Alltoallv": lambda st, spec, writable, what: vector_parts(spec, writable=writable, blocks=st.size, what=what),
          "Alltoallw": lambda st, spec, writable, what: w_parts(spec, st.size, writable=writable, what=what)}


def _parts(st, call: str, sendbuf, recvbuf):
    """Both buffers of Alltoallv or Alltoallw as (blocks, their lengths,
    their rows or None), the send buffer's first; in place, the receive
    buffer's blocks as they are now."""
    parse = _PARSE[call]
    recv = parse(st, recvbuf, True, "recvbuf")
    if is_in_place(sendbuf):
        return (_copies(recv[0]), recv[1], None), recv
    return parse(st, sendbuf, False, "sendbuf"), recv


def _transpose(comm, call: str, sendbuf, recvbuf) -> None:
    """Alltoallv or Alltoallw: by a compiled transpose where one has these
    arguments (``_repeated``), else parsed here; a call whose blocks all
    moved through their rows, or that has a block longer than rows, leaves
    a compiled transpose for its repeats."""
    st = comm._st()
    compiled = st.repeats and _repeated(st, call, sendbuf, recvbuf)
    if compiled:
        return
    st, sc = comm._coll()
    (send, sizes, send_rows), (recv, expected, recv_rows) = _parts(st, call, sendbuf, recvbuf)
    whole = _alltoall_blocks(st, sc, call, send, recv, sizes, expected, send_rows, recv_rows)
    if compiled is None:
        return
    if whole and send_rows is not None and recv_rows is not None:
        _compile(st, call, sendbuf, recvbuf, sizes, expected, (send_rows, recv_rows))
    elif max(*sizes, *expected) > ROWS_COMPILED_UP_TO:  # blocks longer than rows: streamed
        _compile(st, call, sendbuf, recvbuf, sizes, expected, (send, recv))


def _refused(sendbuf, recvbuf) -> bool:
    """What ``_compile`` keeps for arguments it cannot compile: never these."""
    return False


def _compile(st, call: str, sendbuf, recvbuf, sizes, expected, moved) -> None:
    """After a call that moved every block through its rows (``moved``: the
    rows of both sides), or that has a block longer than rows (``moved``:
    both sides' blocks, which a streamed transpose moves): keep a compiled
    transpose of it for the calls that repeat it (none under ``--check``,
    whose hooks see every call in Python)."""
    if checks.any_enabled() or not _compiled_path.available():
        return
    sides = [template(sendbuf), template(recvbuf)]
    if None in sides:
        return
    key = tuple((kind, id(a), id(b), n) for leaves, _ in sides for kind, a, b, n in leaves) + tuple(
        (buf.shape, buf.strides, buf.dtype.str) for _, buf in sides)
    kept = st.repeats.setdefault(call, {})
    if key in kept:
        return
    caller = {"st": st, "engine": st.engine, "flight_names": st.engine.FLIGHT}
    if isinstance(moved[0], np.ndarray):
        made = _compiled_path.repeated(st.sc, st.engine._transport, caller, sizes, expected,
                                       ((*sides[0], moved[0]), (*sides[1], moved[1])), _MAPS)
    else:
        runs = [_runs(blocks, buf) for blocks, (_, buf) in zip(moved, sides)]
        made = _refused if None in runs else _compiled_path.streamed(
            st.sc, st.engine._transport, caller, sizes, expected, ((*sides[0], runs[0]), (*sides[1], runs[1])),
            _MAPS)
    if made is not None:
        if len(kept) >= REPEATS_KEPT:
            del kept[next(iter(kept))]
        kept[key] = made


def _runs(blocks: list[BufSpec], buf: np.ndarray) -> list | None:
    """Each block's runs of memory, offsets from ``buf``'s data pointer (None
    where a block is not a grid of runs)."""
    base = buf.__array_interface__["data"][0]
    runs = [block.runs(base) for block in blocks]
    return None if any(r is None for r in runs) else runs


def _copy_block(source: BufSpec, dest: BufSpec) -> None:
    """A rank's block to itself, in one copy where either side is one run of memory."""
    run = dest.contiguous()
    if run is not None:
        source.pack_range(run, 0)
        return
    run = source.contiguous()
    if run is None:
        run = np.empty(source.nbytes, np.uint8)
        source.pack_range(run, 0)
    dest.unpack_range(run, 0)


@unpacking_class(("Gatherv", "Scatterv", "Allgatherv"))  # Alltoallv and Alltoallw move their blocks directly
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
        _transpose(self, "Alltoallv", sendbuf, recvbuf)

    def Alltoallw(self, sendbuf, recvbuf) -> None:
        """As Alltoallv, with a datatype per block and displacements in bytes."""
        _transpose(self, "Alltoallw", sendbuf, recvbuf)
