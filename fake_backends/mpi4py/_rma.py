"""The data movement of one-sided calls: what an origin buffer and a
target spec of ``Win.Put``/``Get``/``Accumulate``/... mean, and how an
accumulate combines its elements with the target's.

Arguments are parsed as mpi4py parses them (``_p_msg_rma``): the origin is a
buffer spec (``buf``, ``[buf, datatype]``, ``[buf, count, datatype]``, ...);
the target is None (displacement 0, the origin's count and datatype), an
int (the displacement) or ``(disp, count, datatype)`` (shorter tuples keep
the origin's values). The target's bytes are ``disp * disp_unit`` from the
start of its window memory (of a dynamic window: at the address ``disp``)
and must lie inside it (else MPI's ``ERR_RMA_RANGE``); origin and target must have the same type signature
(else ``ERR_TYPE``): the same basic datatype and as many elements, or, for
Put and Get, the same number of bytes.

Accumulates are elementwise, per basic element, as MPI says: ``target =
target op origin`` with MPI's predefined ops, ``REPLACE`` (the origin's
element) and ``NO_OP`` (the target unchanged: Get_accumulate and
Fetch_and_op then only fetch). User ops are not allowed (``ERR_OP``), as in
MPI.
"""

from __future__ import annotations

import operator

import numpy as np

from ._buffers import BufSpec, parse
from ._datatypes import Datatype, lookup
from ._errors import ERR_OP, ERR_RANK, ERR_TYPE, Exception as MPIException
from ._names import CONSTANTS
from ._ops import Op, _fold_loc, _UFUNCS, simdist_op, validate
from ._p2p import PROC_NULL

ERR_RMA_SYNC, ERR_RMA_RANGE, ERR_RMA_FLAVOR = (CONSTANTS[name] for name in ("ERR_RMA_SYNC", "ERR_RMA_RANGE",
                                                                             "ERR_RMA_FLAVOR"))


class Access:
    """One access of a one-sided call: the target rank, the byte offset in
    its window memory, the number of bytes, the datatype of its elements;
    for a derived target datatype, ``index``: the bytes its type map
    covers, in type-map order, counted from ``offset`` (the lowest of
    them), and ``span``, the bytes from ``offset`` to past the highest."""

    __slots__ = ("rank", "offset", "nbytes", "datatype", "count", "index", "span")

    def __init__(self, rank, offset, nbytes, datatype, count, index=None, span=None):
        self.rank, self.offset, self.nbytes, self.datatype, self.count = rank, offset, nbytes, datatype, count
        self.index, self.span = index, nbytes if span is None else span


def origin_spec(origin, writable: bool, target_rank: int, what: str = "origin") -> BufSpec | None:
    """The parsed origin buffer (None for PROC_NULL, which moves nothing)."""
    if target_rank == PROC_NULL:
        if isinstance(origin, (list, tuple)) and origin and isinstance(origin[-1], Datatype):
            return None
        if origin is None:
            return None
    return plain(origin, writable, what)


def plain(buf, writable: bool, what: str) -> BufSpec:
    """``parse`` with the bytes as a plain uint8 array (not the program's MPI.buffer type)."""
    spec = parse(buf, writable=writable, what=what)
    spec.raw = np.asarray(spec.raw)
    return spec


def check_rank(target_rank, size: int, call: str) -> int:
    if isinstance(target_rank, bool) or not isinstance(target_rank, (int, np.integer)):
        raise TypeError(f"Win.{call}: target_rank must be an int, got {type(target_rank).__name__}")
    rank = int(target_rank)
    if rank != PROC_NULL and not 0 <= rank < size:
        raise MPIException(ERR_RANK, f"Win.{call}: target_rank={rank} on a window of {size} ranks")
    return rank


def target_access(win, spec: BufSpec, rank: int, target, call: str) -> Access:
    """Where ``target`` (see the module docstring) points in ``rank``'s window."""
    disp, count, datatype = 0, spec.count, spec.datatype
    if target is None:
        pass
    elif isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        disp = int(target)
    elif isinstance(target, (list, tuple)):
        if len(target) > 3:
            raise ValueError("target: expecting 3 items at most")
        if len(target) >= 1:
            disp = operator.index(target[0])
        if len(target) >= 2:
            count = operator.index(target[1])
        if len(target) >= 3:
            datatype = lookup(target[2])
    else:
        raise ValueError("target: expecting integral or list/tuple")
    if not datatype:
        raise MPIException(ERR_TYPE, f"Win.{call}: the target datatype is MPI.DATATYPE_NULL")
    nbytes = count * datatype.Get_size()
    if nbytes != spec.raw.size:
        raise MPIException(ERR_TYPE, f"Win.{call}: the origin has {spec.count} x {spec.datatype.Get_name()} "
                           f"({spec.raw.size} bytes), the target {count} x {datatype.Get_name()} ({nbytes} bytes)")
    index, low, span = _type_map_bytes(datatype, count, nbytes, call)
    if win.dynamic is not None and count >= 0:
        return Access(rank, win.dynamic.locate(rank, disp + low, span, call), nbytes, datatype, count, index, span)
    offset = disp * win.disp_units[rank] + low
    if count < 0 or disp < 0 or offset < 0 or offset + span > win.segment.sizes[rank]:
        raise MPIException(ERR_RMA_RANGE, f"Win.{call}: {count} x {datatype.Get_name() or 'a derived datatype'} "
                           f"({span} bytes from byte {offset}) at displacement {disp} (x disp_unit "
                           f"{win.disp_units[rank]}) outside the {win.segment.sizes[rank]} bytes of rank {rank}'s window")
    return Access(rank, offset, nbytes, datatype, count, index, span)


def _type_map_bytes(datatype, count: int, nbytes: int, call: str):
    """``(index, low, span)`` of ``count`` elements at a target displacement:
    the bytes they cover, counted from ``low`` bytes past the displacement
    (a type map may reach below it), and how many bytes from there hold
    them. A predefined datatype is contiguous: ``(None, 0, nbytes)``."""
    if not datatype._is_derived() or count <= 0:
        return None, 0, nbytes
    tm = datatype._typemap(f"Win.{call}")
    if not tm.committed:
        raise MPIException(ERR_TYPE, f"Win.{call}: the target datatype is not committed; call its Commit() first")
    index = tm.byte_index(count)
    if not index.size:
        return None, 0, 0
    low = int(index.min())
    return index - low, low, int(index.max()) + 1 - low


def check_accumulate(op, spec: BufSpec, access: Access, call: str, rank: int) -> None:
    """MPI's rules for an accumulate's op and datatypes."""
    if not isinstance(op, Op):
        raise TypeError(f"Win.{call}: op={op!r} must be an MPI.Op such as MPI.SUM")
    if not op:
        raise MPIException(ERR_OP, f"Win.{call}: op is MPI.OP_NULL")
    if op._function is not None:
        raise MPIException(ERR_OP, f"Win.{call}: user-defined ops are not allowed in one-sided accumulates (MPI)")
    if spec.count and _basic(spec.datatype, call) != _basic(access.datatype, call):
        raise MPIException(ERR_TYPE, f"Win.{call}: origin datatype {spec.datatype.Get_name() or '(derived)'} and "
                           f"target datatype {access.datatype.Get_name() or '(derived)'} are not built from one "
                           "predefined datatype")
    if op._key not in ("REPLACE", "NO_OP") and access.count:
        validate(op, access.datatype, f"Win.{call}", rank)


def _basic(datatype, call: str) -> int:
    """The code of the one predefined datatype an accumulate's datatype is
    built from (MPI: each is predefined, or derived from one predefined type)."""
    uniform = datatype._typemap(f"Win.{call}").uniform
    if uniform is None:
        raise MPIException(ERR_TYPE, f"Win.{call}: an accumulate's derived datatype must be built from one "
                           "predefined datatype")
    return uniform


def combine(op: Op, target: np.ndarray, origin: np.ndarray, datatype) -> None:
    """``target = target op origin`` in place, element by element (uint8 views)."""
    key = op._key
    if key == "NO_OP" or not target.size:
        return
    if key == "REPLACE":
        target[...] = origin
        return
    dtype = datatype.dtype
    t, o = target.view(dtype), origin.view(dtype)
    if key in ("MAXLOC", "MINLOC"):
        t[...] = _fold_loc(key, [t, o], np.array(t, copy=True))
        return
    with np.errstate(all="ignore"):
        _UFUNCS[simdist_op(op)](t, o, out=t)
