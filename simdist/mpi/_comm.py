"""The MPI backend's communicator: the contract's collectives over mpi4py.

Each collective is one call of mpi4py's buffer API on contiguous buffers.
Inputs are handed to MPI only as send buffers (a contiguous copy when they
are not contiguous); results are received into new arrays, so MPI never
writes into a caller's array and read-only inputs work. Broadcast and
scatter first broadcast root's dtype and shape (a small pickled ``bcast``),
so non-roots may pass ``None``; ``send`` sends the dtype and shape as a
message of its own before the data, with the same tag, and MPI's
non-overtaking rule keeps the messages of one (source, tag) in order.

Where the library does not give the contract's result by itself:

- Open MPI saturates MPI_SUM on 8- and 16-bit integers (its op/avx
  component; open-mpi/ompi#8045, "wontfix": MPI leaves overflow undefined).
  The contract wraps, so these sums are reduced as uint32 and narrowed back:
  exact, for up to 4x the bytes.
- With one rank MPI copies the input instead of applying the op, so logical
  ops on integers are mapped to 0/1 afterwards.
- MPI defines only the logical ops on MPI_C_BOOL: bool ``band``/``min``
  reduce with MPI_LAND, ``bor``/``max`` with MPI_LOR and ``bxor`` with
  MPI_LXOR, the same functions on True/False.
- ``mean`` is MPI_SUM, then the division by ``size`` in the input dtype
  (each component for complex), as in the simulator.

Deliberate differences from the simulator (where MPI leaves a choice, the
library's choice is kept: the point of this backend is to run real MPI):

- **Reduction order** is the library's. Open MPI picks an algorithm by
  message size and number of ranks, and a ring reduces different blocks in
  different orders, so floating-point results are identical on every rank of
  a call but are not the simulator's left fold, and ``reduce`` and
  ``reduce_scatter`` need not equal ``allreduce`` to the bit. Complex
  ``prod`` is the library's complex multiply, not the textbook formula of
  ``simdist._reduction``. Integer, min, max, bitwise and logical results are
  exact, as the contract's.
- **NaN in min/max.** Open MPI's MPI_MIN and MPI_MAX compare with ``<`` and
  ``>``, so a NaN is kept or dropped depending on where it meets the other
  operands; the simulator (numpy) always propagates it.
- **Dtypes.** float16 travels as the library's 16-bit float (mpi4py maps it
  to MPI_SHORT_FLOAT, which Open MPI provides with its reductions). A dtype,
  or an (op, dtype) pair, the library does not support raises
  :class:`simdist.InvalidType` naming the backend, the call and the reason.
- **Mismatched calls** (other collectives, dtypes, shapes, ops or roots on
  different ranks) are not detected by default: MPI may hang, fail or mix
  data. Two cases are caught because they are common and cost nothing: a
  root whose broadcast or scatter argument is invalid tells the non-roots,
  so every rank raises instead of waiting; and a non-root that passes
  broadcast an array of another dtype or shape than root's raises
  CollectiveMismatch, on that rank only, after the transfer.
- **check_calls=True** (``World(backend="mpi", check_calls=True)``) detects
  them as the simulator does. Before every collective (send and recv are
  not collective and are not checked) each rank allgathers a fixed-width
  int64 row: the simulator's signature (kind, sequence number on this
  communicator, op, root, dtype code, ndim, shape; "no array" for a
  non-root's ``None`` in broadcast/scatter) with the shape padded to 8
  words, then split's color and key, which are not compared. Every rank
  makes that same Allgather whatever collective it means to call, so
  different collectives meet there too. The rows are compared by the
  simulator's rules, with its messages (``simdist._signature``), and a
  mismatch raises CollectiveMismatch on every rank of the call before any
  data moves; the communicator stays usable, and sub-communicators from
  ``split`` check their calls too. The cost is that one Allgather of 128
  bytes per collective (a second one only for arrays of more than 8
  dimensions); broadcast and scatter read root's dtype and shape from the
  rows instead of a pickled ``bcast``, split its colors and keys, and
  barrier is the Allgather alone. What the simulator also catches but this
  cannot: a rank that returns from the function, or waits in send/recv or
  in a collective of another communicator, while its peers wait in a
  collective. The peers then wait in the signature Allgather until the
  world's timeout, a CollectiveTimeout whose report names each rank's call,
  where the simulator raises CollectiveMismatch at once. A rank whose own
  arguments are invalid raises before it signs, as on the simulator; its
  peers wait, and the run ends as a RankError after the grace period.
- **Tags** must not exceed MPI_TAG_UB (2**31 - 1 in Open MPI; the standard
  guarantees only 32767); the simulator takes any tag below 2**63.
- **free** releases the communicators ``split`` returns; the one an
  ``MpiComm`` is built on belongs to its caller, so ``free`` raises there,
  as on the simulator's world communicator.

Runs of a World (``RunComms``): each ``World.run`` gets a fresh duplicate of
MPI_COMM_WORLD, so a message an earlier run left unreceived never matches a
receive of a later one (MPI matches within one communicator's context).
The next run closes the earlier run's communicators, its splits included:
a call on one kept past its run raises, as on the simulator, and their MPI
communicators are freed (after the new duplicate is made, so it cannot
take their context).

Importing this module initialises MPI (mpi4py's default).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._arguments import DTYPE_CODE, DTYPES, OP_CODE, as_input, check_blocks, check_int, check_op, check_rank_arg, check_stackable, where
from .._communicator import Communicator
from .._mpi4py_comm import NOT_THE_WORLD
from .._errors import CollectiveMismatch, InvalidArgument, InvalidType, InvalidValue, SimdistError
from .._reduction import LOGICAL, divide_mean
from .. import _signature as sig

__all__ = ["MpiComm", "RunComms"]

_LIBRARY = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()


def _datatype(dtype: np.dtype):
    """The library's datatype for ``dtype`` by mpi4py's mapping, or None."""
    try:
        datatype = MPI.Datatype.fromcode(dtype.str[1:])  # 'b1', 'i8', 'f2', 'c16', ...
    except ValueError:
        return None
    return None if datatype == MPI.DATATYPE_NULL else datatype


#: MPI datatype of each contract dtype; a dtype the library cannot carry is absent.
TYPES = {dt: t for dt in DTYPES if (t := _datatype(dt)) is not None}

_OPS = {
    "sum": MPI.SUM, "mean": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
    "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR, "land": MPI.LAND, "lor": MPI.LOR, "lxor": MPI.LXOR,
}
# MPI_C_BOOL takes only the logical ops; on True/False these are the same functions.
_BOOL_OPS = {**_OPS, "min": MPI.LAND, "band": MPI.LAND, "max": MPI.LOR, "bor": MPI.LOR, "bxor": MPI.LXOR}
# 8- and 16-bit integer sums travel as uint32 (see the module docstring):
# uint32 additions wrap modulo 2**32, and narrowing keeps the low bits.
_WIDE = np.dtype(np.uint32)
_WIDENED = frozenset(dt for dt in DTYPES if dt.kind in "iu" and dt.itemsize < _WIDE.itemsize)

# check_calls: the signature row every rank shares before a collective. The
# simulator's words (kind, seq, op, root, dtype code, ndim, shape...), the
# shape padded with zeros to _DIMS words; then split's color and key, which
# are not compared (the split itself needs them). A shape of more than _DIMS
# dimensions follows in a second Allgather of _MAX_DIMS words per rank.
_K = sig.KIND_CODE
_DIMS = 8
_COMPARED = sig.HEAD_WORDS + _DIMS
_ROW = _COMPARED + 2
_MAX_DIMS = sig.MAX_NDIM
# A row signing None, from the dtype code on (the words before are root's).
_NONE_TAIL = np.array([0, -1] + [0] * (_ROW - sig.HEAD_WORDS), np.int64).tobytes()

# Why a communicator refuses every call (see _open).
_FREED = "that was freed"
_EARLIER_RUN = ("that belongs to an earlier run; a communicator lasts only for the World.run call that made it: "
                "use the one this run passes to the function (and split it again)")


def _unsupported(rank: int, name: str, dtype: np.dtype) -> InvalidType:
    if dtype.kind == "f":
        why, fix = f"it has no {8 * dtype.itemsize}-bit float type", "convert with x.astype(np.float32)"
    else:
        why, fix = "it has no datatype for it", "convert it to a dtype the library has"
    return InvalidType(
        f"{where(rank, name)}: dtype {dtype} is not supported by the mpi backend ({_LIBRARY}: {why}); "
        f"{fix}, or run on the sim backend"
    )


def _finish(out: np.ndarray | None, op: str, size: int, dtype: np.dtype) -> np.ndarray | None:
    """What is left after MPI: narrow a widened sum back to ``dtype``; divide
    the sum by ``size`` for ``mean`` (each component for complex), as the
    simulator does; and with one rank, where MPI copies the input instead of
    applying the op, make logical ops on integers give 0/1."""
    if out is None:
        return None
    if out.dtype != dtype:
        return out.astype(dtype)  # keeps the low bits: the wrapped sum
    if op == "mean":
        divide_mean(out, size)
    elif size == 1 and op in LOGICAL and out.dtype.kind != "b":
        np.copyto(out, out != 0, casting="unsafe")
    return out


class MpiComm(Communicator):
    """A communicator over an mpi4py intracommunicator; the semantics are
    those of :class:`simdist.Communicator`, with the differences listed in
    this module's docstring.

    ``MpiComm(comm)`` uses ``comm`` without owning it; ``MpiComm.world()``
    is every process of the MPI job. Communicators returned by ``split`` are
    owned, and ``free`` releases them. ``check_calls=True`` makes every
    collective first compare the ranks' call signatures, so mismatched calls
    raise :class:`simdist.CollectiveMismatch` on every rank (see the module
    docstring); ``sync_sends=True`` makes ``send`` synchronous (``Ssend``:
    it returns once the matching ``recv`` has started). Communicators
    returned by ``split`` inherit both.
    """

    def __init__(self, comm, *, check_calls: bool = False, sync_sends: bool = False, _owned: bool = False,
                 _name: str | None = None, _run: list | None = None):
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise InvalidType(f"MpiComm: comm={comm!r} must be an mpi4py intracommunicator, such as MPI.COMM_WORLD")
        self._comm = comm
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._owned = _owned
        self._closed = None  # why every call raises: _FREED, _EARLIER_RUN
        # The live communicators of the World.run this one belongs to (None:
        # not a run's); its splits join it, and free leaves it (RunComms).
        self._run = _run
        if _run is not None:
            _run.append(self)
        self._dup = None  # the duplicate for mpi4py code (mpi4py_dup)
        self._tag_ub = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
        self._check = bool(check_calls)
        self._sync = bool(sync_sends)
        self._send = comm.Ssend if self._sync else comm.Send  # see send
        if self._check:
            if _name is None:
                same = MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
                _name = "the world" if same else "the communicator"
            self._name = _name
            self._seq = 0  # collectives called on this communicator
            self._row = np.zeros(_ROW, np.int64)
            self._rows = np.zeros((self._size, _ROW), np.int64)
            self._row_bufs = ([self._row, MPI.INT64_T], [self._rows, MPI.INT64_T])
            self._shapes = None  # every rank's full shape, after a second Allgather

    @classmethod
    def world(cls, *, check_calls: bool = False, sync_sends: bool = False) -> "MpiComm":
        """Every process of the MPI job, on a duplicate of MPI_COMM_WORLD so
        that direct mpi4py traffic on COMM_WORLD never mixes with this
        communicator's. Collective over every process of the job."""
        return cls(MPI.COMM_WORLD.Dup(), check_calls=check_calls, sync_sends=sync_sends)

    @property
    def check_calls(self) -> bool:
        """Whether every collective first compares the ranks' signatures."""
        return self._check

    @property
    def sync_sends(self) -> bool:
        """Whether ``send`` is synchronous (``Ssend``)."""
        return self._sync

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def _open(self, name: str) -> None:
        if self._closed:
            raise SimdistError(f"rank {self._rank}: {name} on a communicator {self._closed}")

    def mpi4py_dup(self):
        """``simdist.mpi4py_comm``: a duplicate of the MPI communicator, for
        code written with mpi4py (its messages never match ``send``/``recv``'s);
        made at the first call (collective, as MPI_Comm_dup), then the same;
        freed with this communicator. Only for the world (or a communicator
        congruent with it): the simulator has no mpi4py sub-communicators."""
        self._open("mpi4py_comm")
        if MPI.Comm.Compare(self._comm, MPI.COMM_WORLD) not in (MPI.IDENT, MPI.CONGRUENT):
            raise InvalidType(f"rank {self._rank}: mpi4py_comm: {NOT_THE_WORLD}")
        if self._dup is None:
            self._dup = self._comm.Dup()
        return self._dup

    def _free_mpi(self) -> None:
        """Free the MPI communicator and the duplicate for mpi4py code (unless the code freed it)."""
        for comm in (self._dup, self._comm):
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()

    def _type(self, dtype: np.dtype, name: str):
        datatype = TYPES.get(dtype)
        if datatype is None:
            raise _unsupported(self._rank, name, dtype)
        return datatype

    # -- check_calls ------------------------------------------------------------
    def _sign(self, kind: int, x: np.ndarray | None = None, op: int = 0, root: int = -1, extra=()) -> np.ndarray:
        """Share this call's signature with every rank (one Allgather of a
        fixed-width row) and raise CollectiveMismatch, on every rank alike,
        unless the calls match by the simulator's rules. Returns the rows,
        one per rank; ``extra`` fills the words after the compared ones.

        Every rank makes this same Allgather whatever collective it is
        about to call, so different collectives meet here too.
        """
        self._seq += 1
        row, rows = self._row, self._rows
        row.fill(0)
        if x is None:
            ndim = -1
            row[: sig.HEAD_WORDS] = (kind, self._seq, op, root, 0, -1)
        else:
            ndim = x.ndim
            head = (kind, self._seq, op, root, DTYPE_CODE[x.dtype], ndim, *x.shape[:_DIMS])
            row[: len(head)] = head
        if extra:
            row[_COMPARED:] = extra
        self._comm.Allgather(*self._row_bufs)
        self._shapes = None
        # The common cases, decided alike on every rank from the same rows:
        # identical rows, or non-roots of broadcast/scatter signing None.
        rows_bytes = rows.tobytes()
        uniform = rows_bytes == row.tobytes() * self._size
        same = uniform or (kind in sig.ROOT_ONLY_ARRAY and self._only_nones_differ(rows_bytes, root))
        if (ndim if uniform else int(rows[:, 5].max())) > _DIMS:
            self._gather_shapes(x)
            same = uniform and bool((self._shapes == self._shapes[0]).all())
        if same:
            return rows
        sigs = {r: self._signature(r) for r in range(self._size)}
        sig.check_match(self._name, sigs)
        return rows

    @staticmethod
    def _only_nones_differ(rows_bytes: bytes, root: int) -> bool:
        """Every row is root's, or root's call with None for the array."""
        width = 8 * _ROW
        ref = rows_bytes[root * width : (root + 1) * width]
        none = ref[: 8 * 4] + _NONE_TAIL  # kind, seq, op, root as root's
        return all(rows_bytes[i : i + width] in (ref, none) for i in range(0, len(rows_bytes), width))

    def _gather_shapes(self, x) -> None:
        """Second round, for shapes of more than _DIMS dimensions."""
        mine = np.zeros(_MAX_DIMS, np.int64)
        if x is not None and x.ndim:
            mine[: min(x.ndim, _MAX_DIMS)] = x.shape[:_MAX_DIMS]
        self._shapes = np.empty((self._size, _MAX_DIMS), np.int64)
        self._comm.Allgather([mine, MPI.INT64_T], [self._shapes, MPI.INT64_T])

    def _signature(self, rank: int) -> tuple[int, ...]:
        """Rank ``rank``'s row of the last call in the simulator's format."""
        row = self._rows[rank]
        ndim = int(row[5])
        head = tuple(int(w) for w in row[: sig.HEAD_WORDS])
        if ndim <= _DIMS:
            return head + tuple(int(w) for w in row[sig.HEAD_WORDS : sig.HEAD_WORDS + max(ndim, 0)])
        return head + tuple(int(w) for w in self._shapes[rank, : min(ndim, _MAX_DIMS)])

    # -- reductions -----------------------------------------------------------
    def allreduce(self, x, op="sum"):
        return self._reduction("allreduce", x, op)

    def reduce(self, x, root=0, op="sum"):
        return self._reduction("reduce", x, op, root)

    def reduce_scatter(self, x, op="sum"):
        return self._reduction("reduce_scatter", x, op)

    def _reduction(self, name: str, x, op, root=None):
        me = self._rank
        self._open(name)
        x = as_input(x, me, name)
        if name == "reduce":
            root = check_rank_arg(root, self._size, me, name, "root")
        elif name == "reduce_scatter":
            check_blocks(x, self._size, me, name)
        check_op(op, x.dtype, me, name)
        if self._check:
            self._sign(_K[name], x, OP_CODE[op], root if name == "reduce" else -1)
        self._type(x.dtype, name)
        send = x.astype(_WIDE, order="C") if op == "sum" and x.dtype in _WIDENED else np.ascontiguousarray(x)
        datatype, mpi_op = TYPES[send.dtype], (_BOOL_OPS if x.dtype.kind == "b" else _OPS)[op]
        shape = x.shape[1:] if name == "reduce_scatter" else x.shape
        out = np.empty(shape, send.dtype) if name != "reduce" or me == root else None
        try:
            if name == "allreduce":
                self._comm.Allreduce([send, datatype], [out, datatype], mpi_op)
            elif name == "reduce":
                self._comm.Reduce([send, datatype], None if out is None else [out, datatype], mpi_op, root)
            else:
                self._comm.Reduce_scatter_block([send, datatype], [out, datatype], mpi_op)
        except MPI.Exception as exc:  # the library refuses the pair before communicating
            if exc.Get_error_class() not in (MPI.ERR_OP, MPI.ERR_TYPE):
                raise
            raise InvalidType(
                f"{where(me, name)}: op={op!r} on dtype {x.dtype} is not supported by the mpi backend "
                f"({_LIBRARY}: {exc.Get_error_string()}); convert to a wider dtype, or run on the sim backend"
            ) from None
        return _finish(out, op, self._size, x.dtype)

    # -- data movement ----------------------------------------------------------
    def _from_root(self, x, root: int, name: str):
        """Share root's checked dtype and shape; returns ``(x, dtype, shape)``.

        If root's ``x`` is invalid, root sends the error instead, so that
        every rank raises rather than the non-roots waiting for data. Without
        check_calls the metadata is a small pickled ``bcast``; with it, the
        signature rows carry root's dtype and shape, and the ``bcast`` is
        made only to send an error.
        """
        me = self._rank
        meta = None
        if me == root:
            try:
                x = as_input(x, me, name)
                if name == "scatter":
                    check_blocks(x, self._size, me, name)
                self._type(x.dtype, name)
                meta = (x.dtype.str, x.shape)
            except InvalidArgument as exc:
                meta = exc
        if self._check:
            if me == root:
                signed = None if isinstance(meta, InvalidArgument) else x
            else:  # an invalid array is signed as None and raises after the transfer, as unchecked
                try:
                    signed = None if x is None else as_input(x, me, name)
                except InvalidArgument:
                    signed = None
            rows = self._sign(_K[name], signed, 0, root)
            code, ndim = rows[root, 4:6].tolist()
            if ndim < 0:  # root could not send: the error follows
                meta = self._comm.bcast(meta, root)
            else:
                dims = self._shapes[root] if ndim > _DIMS else rows[root, sig.HEAD_WORDS :]
                meta = (DTYPES[code - 1], dims[:ndim].tolist())
        else:
            meta = self._comm.bcast(meta, root)
        if isinstance(meta, InvalidArgument):
            if me == root:
                raise meta
            raise type(meta)(f"{where(me, name)}: root {root} could not send: {meta}")
        return x, np.dtype(meta[0]), tuple(meta[1])

    def broadcast(self, x, root=0):
        self._open("broadcast")
        root = check_rank_arg(root, self._size, self._rank, "broadcast", "root")
        x, dtype, shape = self._from_root(x, root, "broadcast")
        is_root = self._rank == root
        out = np.array(x, order="C") if is_root else np.empty(shape, dtype)
        self._comm.Bcast([out, TYPES[dtype]], root)
        if not is_root and x is not None:
            x = as_input(x, self._rank, "broadcast")
            if (x.dtype, x.shape) != (dtype, shape):
                raise CollectiveMismatch(
                    f"rank {self._rank}: broadcast: x has dtype {x.dtype} and shape {x.shape}, but root {root} "
                    f"broadcast dtype {dtype} and shape {shape}; non-roots pass None or an array of root's "
                    "dtype and shape",
                    {root: f"broadcast ({dtype} {shape}, root={root})",
                     self._rank: f"broadcast ({x.dtype} {x.shape}, root={root})"},
                )
        return out

    def scatter(self, x, root=0):
        self._open("scatter")
        root = check_rank_arg(root, self._size, self._rank, "scatter", "root")
        x, dtype, shape = self._from_root(x, root, "scatter")
        is_root = self._rank == root
        datatype = TYPES[dtype]
        out = np.empty(shape[1:], dtype)
        self._comm.Scatter([np.ascontiguousarray(x), datatype] if is_root else None, [out, datatype], root)
        if not is_root and x is not None:
            as_input(x, self._rank, "scatter")  # ignored, but still checked as on the simulator
        return out

    def allgather(self, x):
        self._open("allgather")
        x = as_input(x, self._rank, "allgather")
        check_stackable(x, self._rank, "allgather")
        if self._check:
            self._sign(_K["allgather"], x)
        datatype = self._type(x.dtype, "allgather")
        out = np.empty((self._size, *x.shape), x.dtype)
        self._comm.Allgather([np.ascontiguousarray(x), datatype], [out, datatype])
        return out

    def gather(self, x, root=0):
        self._open("gather")
        x = as_input(x, self._rank, "gather")
        check_stackable(x, self._rank, "gather")
        root = check_rank_arg(root, self._size, self._rank, "gather", "root")
        if self._check:
            self._sign(_K["gather"], x, 0, root)
        datatype = self._type(x.dtype, "gather")
        out = np.empty((self._size, *x.shape), x.dtype) if self._rank == root else None
        self._comm.Gather([np.ascontiguousarray(x), datatype], None if out is None else [out, datatype], root)
        return out

    def alltoall(self, x):
        self._open("alltoall")
        x = as_input(x, self._rank, "alltoall")
        check_blocks(x, self._size, self._rank, "alltoall")
        if self._check:
            self._sign(_K["alltoall"], x)
        datatype = self._type(x.dtype, "alltoall")
        out = np.empty(x.shape, x.dtype)
        self._comm.Alltoall([np.ascontiguousarray(x), datatype], [out, datatype])
        return out

    def barrier(self):
        self._open("barrier")
        if self._check:
            self._sign(_K["barrier"])  # an Allgather: no rank leaves it before every rank entered
            return
        self._comm.Barrier()

    # -- point to point ---------------------------------------------------------
    def _tag(self, tag, name: str) -> int:
        tag = check_int(tag, self._rank, name, "tag", minimum=0)
        if tag > self._tag_ub:
            raise InvalidValue(
                f"{where(self._rank, name)}: tag={tag} is above the mpi backend's largest tag, "
                f"MPI_TAG_UB={self._tag_ub}; use a smaller tag"
            )
        return tag

    def send(self, x, dest, tag=0):
        x = as_input(x, self._rank, "send")
        dest = check_rank_arg(dest, self._size, self._rank, "send", "dest")
        tag = self._tag(tag, "send")
        self._open("send")
        datatype = self._type(x.dtype, "send")
        self._comm.send((x.dtype.str, x.shape), dest, tag)
        # With sync_sends the data goes by Ssend: its completion needs the
        # receiver's Recv, which follows the metadata's recv.
        self._send([np.ascontiguousarray(x), datatype], dest, tag)

    def recv(self, source, tag=0):
        source = check_rank_arg(source, self._size, self._rank, "recv", "source")
        tag = self._tag(tag, "recv")
        self._open("recv")
        dtype, shape = self._comm.recv(source=source, tag=tag)
        out = np.empty(shape, dtype)
        self._comm.Recv([out, TYPES[out.dtype]], source, tag)
        return out

    # -- communicators ------------------------------------------------------------
    def split(self, color, key=0):
        if color is not None:
            color = check_int(color, self._rank, "split", "color", minimum=0)
        key = check_int(key, self._rank, "split", "key")
        self._open("split")
        # MPI takes C ints; the contract takes any int64 color and key. So the
        # ranks share theirs and pass MPI the positions, which order alike.
        # With check_calls they travel in the signature rows (None as -1).
        if self._check:
            rows = self._sign(_K["split"], extra=(-1 if color is None else color, key))
            table = [(None if c < 0 else c, k) for c, k in rows[:, _COMPARED:].tolist()]
        else:
            table = self._comm.allgather((color, key))
        if color is None:
            self._comm.Split(MPI.UNDEFINED, 0)  # MPI_COMM_NULL
            return None
        colors = sorted({c for c, _ in table if c is not None})
        group = sorted((k, r) for r, (c, k) in enumerate(table) if c == color)
        sub = self._comm.Split(colors.index(color), group.index((key, self._rank)))
        if self._check:
            return MpiComm(sub, check_calls=True, sync_sends=self._sync, _owned=True,
                           _name=f"a sub-communicator (color {color})", _run=self._run)
        return MpiComm(sub, sync_sends=self._sync, _owned=True, _run=self._run)

    def free(self):
        if not self._owned:
            raise InvalidValue(
                f"rank {self._rank}: free: the communicator MpiComm was built on (the world, or one its "
                "caller owns) cannot be freed; only communicators returned by split can"
            )
        if self._closed is _FREED:
            return
        self._open("free")
        if self._check:
            self._sign(_K["free"])
        self._free_mpi()
        self._closed = _FREED
        if self._run is not None:
            self._run.remove(self)


class RunComms:
    """The communicators of an MPI worker's runs (see the module docstring).

    ``start()`` is collective over MPI_COMM_WORLD; every rank calls it at
    the start of each run, so their duplicates match.
    """

    def __init__(self, **options):
        self._options = options
        self._live: list[MpiComm] = []  # the last run's communicators not freed

    def start(self) -> MpiComm:
        """The world communicator of a new run; closes the last run's."""
        earlier, self._live = self._live, []
        comm = MpiComm(MPI.COMM_WORLD.Dup(), _run=self._live, **self._options)
        for old in earlier:
            old._closed = _EARLIER_RUN
            old._free_mpi()
        return comm
