"""Reduction operations: MPI.SUM ... MPI.MINLOC, user ops, and the folds.

Every reduction of the stand-in is the rank-ascending left fold
``((x0 op x1) op x2) ...``, the order simdist promises:

* buffers with a predefined op and a dtype of the simdist contract go to
  the SimComm's own reduction (``allreduce``/``reduce``), which folds in
  that order, bit for bit;
* Scan and Exscan, user ops (``Op.Create``), MAXLOC/MINLOC on pair
  datatypes (``MPI.DOUBLE_INT``, ...) and dtypes outside the contract
  (``long double``) gather the buffers a chunk at a time and fold each
  chunk here into the receive buffer, in rank order, with the same fold
  (``simdist._reduction.fold``) where simdist has it;
* a user op's function is called as mpi4py calls it,
  ``function(inbuf, inoutbuf, datatype)`` with two writable ``MPI.buffer``
  objects over the operands' memory (no ``obj``); ``inoutbuf`` holds the
  later rank's operand and receives ``inbuf op inoutbuf``, and on the fold's
  last step it is the receive buffer itself or a buffer then copied into it
  (``Reduce_local``: the caller's two buffers), so what the function writes
  through ``inoutbuf.address`` is the result;
* Python objects (lowercase ``reduce``, ``allreduce``, ``scan``, ``exscan``)
  are folded as mpi4py's "naive" reductions do: ``res = op(res, item)`` over
  the items in rank order, with mpi4py's functions for the predefined ops
  (``MPI.MAX(x, y)`` is ``y if y > x else x``, MAXLOC takes (value, index)
  pairs and the lower index on ties, ...). mpi4py may use a tree instead;
  for an associative op the result is the same.
"""

from __future__ import annotations

import numpy as np

from simdist._arguments import DTYPE_CODE, check_op
from simdist._reduction import fold

from . import _handleleaks
from ._errors import ERR_OP, Exception as MPIException
from ._handles import Handle, IntegerHandles, check_handle, is_constant, new_handle
from ._layouts import Grid


def _op_max(x, y):
    return y if y > x else x


def _op_min(x, y):
    return y if y < x else x


def _op_maxloc(x, y):
    (u, i), (v, j) = x, y
    if u > v:
        return u, i
    if v > u or j < i:
        return v, j
    return u, i


def _op_minloc(x, y):
    (u, i), (v, j) = x, y
    if u < v:
        return u, i
    if v < u or j < i:
        return v, j
    return u, i


_OBJECT_FUNCS = {
    "MAX": _op_max,
    "MIN": _op_min,
    "SUM": lambda x, y: x + y,
    "PROD": lambda x, y: x * y,
    "LAND": lambda x, y: bool(x) & bool(y),
    "BAND": lambda x, y: x & y,
    "LOR": lambda x, y: bool(x) | bool(y),
    "BOR": lambda x, y: x | y,
    "LXOR": lambda x, y: bool(x) ^ bool(y),
    "BXOR": lambda x, y: x ^ y,
    "MAXLOC": _op_maxloc,
    "MINLOC": _op_minloc,
    "REPLACE": lambda x, y: y,
    "NO_OP": lambda x, y: x,
}
#: MPI op -> simdist op name, where simdist has the op.
_SIMDIST = {"MAX": "max", "MIN": "min", "SUM": "sum", "PROD": "prod", "LAND": "land", "BAND": "band",
            "LOR": "lor", "BOR": "bor", "LXOR": "lxor", "BXOR": "bxor"}
_UFUNCS = {"max": np.maximum, "min": np.minimum, "sum": np.add, "prod": np.multiply, "band": np.bitwise_and,
           "bor": np.bitwise_or, "bxor": np.bitwise_xor, "land": np.logical_and, "lor": np.logical_or,
           "lxor": np.logical_xor}


MAX_USER_OPS = 32
_USER_OPS: set = set()  # the live user ops


class Op(Handle, IntegerHandles):
    """An MPI reduction operation. Calling it on two objects applies it
    (``MPI.SUM(1, 2) == 3``), as mpi4py's ops do."""

    def _init(self, op: "Op | None" = None, *, _key: str = "OP_NULL", _function=None, _commute: bool = True) -> None:
        if op is not None:
            check_handle(op, Op, type(self))
            _key, _function, _commute = op._key, op._function, op._commute
        self._key = _key
        self._function = _function  # user ops: function(inbuf, inoutbuf, datatype)
        self._commute = bool(_commute)
        # the MPI handle: a predefined op's key; each user op its own (copies share it)
        self._id = op._id if op is not None else (_key if _function is None else object())

    def __call__(self, x, y):
        if self._function is not None:
            return self._function(x, y, None)
        try:
            return _OBJECT_FUNCS[self._key](x, y)
        except KeyError:
            raise ValueError("cannot call user-defined operation") from None

    def __eq__(self, other):
        if not isinstance(other, Op):
            return NotImplemented
        return self._id is other._id or self._id == other._id

    def __bool__(self):
        return self._key != "OP_NULL"

    def __repr__(self):
        return f"<mpi4py.MPI.Op MPI_{self._key} (simdist)>"

    @classmethod
    def Create(cls, function, commute: bool = False) -> "Op":
        """A user op: ``function(inbuf, inoutbuf, datatype)`` stores
        ``inbuf op inoutbuf`` into ``inoutbuf`` (``MPI.buffer`` objects over
        the operands' bytes, as mpi4py passes them; see ``fold_into``)."""
        if not callable(function):
            raise TypeError(f"Op.Create: function={function!r} is not callable")
        if len(_USER_OPS) >= MAX_USER_OPS:  # mpi4py's registry of user functions has room for 32
            raise RuntimeError("cannot create too many user-defined reduction operations")
        op = new_handle(cls)
        op._init(_key="USER", _function=function, _commute=commute)
        _USER_OPS.add(op._id)
        _handleleaks.handle_made(op._id, "op", op)
        return op

    def Free(self) -> None:
        """Free a user op; the handle becomes MPI.OP_NULL (MPI_ERR_OP for a
        predefined op or OP_NULL, as under Open MPI)."""
        if self._function is None:
            raise MPIException(ERR_OP, f"Op.Free of MPI.{self._key}, a predefined op")
        _USER_OPS.discard(self._id)
        _handleleaks.handle_freed(self._id)
        self._init()

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's ``free``); a handle on a
        predefined op becomes null, the predefined object stays."""
        if self._function is not None:
            self.Free()
        elif not is_constant(self):
            self._init()

    def Is_commutative(self) -> bool:
        return self._commute

    is_commutative = property(Is_commutative)
    is_predefined = property(lambda self: self._function is None)

    def Reduce_local(self, inbuf, inoutbuf) -> None:
        """``inoutbuf = inbuf op inoutbuf``, element by element."""
        from ._buffers import parse

        src = parse(inbuf, writable=False, what="inbuf")
        dst = parse(inoutbuf, writable=True, what="inoutbuf")
        if src.raw.size != dst.raw.size:
            raise ValueError(f"mismatch in inbuf count {src.count} and inoutbuf count {dst.count}")
        if self._function is not None:  # as MPI_Reduce_local: the function on the two buffers themselves
            self._function(_in_memory(src), _in_memory(dst), dst.datatype)
            return
        dst.typed[...] = fold_arrays(self, [src.typed, dst.typed], dst.datatype, "Reduce_local", 0)


    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Op", name)


OP_NULL = Op()
PREDEFINED = {key: Op(_key=key) for key in _OBJECT_FUNCS}


def simdist_op(op) -> str | None:
    """simdist's name for a predefined op it has (``"sum"``), else None."""
    return _SIMDIST.get(op._key) if isinstance(op, Op) and op._function is None else None


def check(op, call: str) -> Op:
    if not isinstance(op, Op):
        raise TypeError(f"{call}: op={op!r} must be an MPI.Op such as MPI.SUM")
    if not op:
        raise MPIException(ERR_OP, f"{call}: op is MPI.OP_NULL")
    if op._key in ("REPLACE", "NO_OP"):
        raise MPIException(ERR_OP, f"{call}: MPI.{op._key} is only for one-sided accumulates")
    return op


# -- folds ------------------------------------------------------------------------
def fold_objects(op, items: list):
    """mpi4py's naive reduction: ``res = op(res, item)`` in rank order.
    ``op`` is an MPI.Op or any callable of two arguments."""
    res = items[0]
    for item in items[1:]:
        res = op(res, item)
    return res


def validate(op: Op, datatype, call: str, rank: int) -> None:
    """Raise if ``op`` is not defined on ``datatype`` (on every rank alike,
    also where a rank has nothing to fold)."""
    if op._function is not None:
        return
    dtype = datatype.dtype
    if op._key in ("MAXLOC", "MINLOC"):
        if dtype.names != ("value", "index"):
            raise MPIException(
                ERR_OP, f"{call}: MPI.{op._key} needs a (value, index) pair datatype such as MPI.DOUBLE_INT or "
                f"MPI.TWOINT, not {datatype.Get_name()}; for Python objects use the lowercase API with "
                "(value, index) tuples"
            )
        return
    name = simdist_op(op)
    if dtype in DTYPE_CODE:
        check_op(name, dtype, rank, call)  # simdist's message for an op the dtype does not have
    elif dtype.kind not in "fc" or (name not in ("sum", "prod") and not (dtype.kind == "f" and name in ("max", "min"))):
        raise MPIException(ERR_OP, f"{call}: MPI.{op._key} is not defined on {datatype.Get_name()}")


def fold_arrays(op: Op, parts: list[np.ndarray], datatype, call: str, rank: int) -> np.ndarray:
    """The rank-order fold of 1-D arrays ``parts`` (one per rank) with ``op``."""
    validate(op, datatype, call, rank)
    if op._function is not None:
        out = np.empty(parts[0].shape, parts[0].dtype)
        fold_into(op, [p.view(np.uint8) for p in parts], out.view(np.uint8), datatype, call, rank)
        return out
    out = np.array(parts[0], copy=True)
    if len(parts) == 1:
        return out
    if op._key in ("MAXLOC", "MINLOC"):
        return _fold_loc(op._key, parts, out)
    name = simdist_op(op)
    if out.dtype in DTYPE_CODE:
        return fold(name, parts, out)
    ufunc = _UFUNCS[name]
    with np.errstate(all="ignore"):
        for part in parts[1:]:
            ufunc(out, part, out=out)
    return out


def mpibuf(raw: np.ndarray):
    """What mpi4py passes a user op for an operand: a writable ``MPI.buffer``
    over its bytes, ``obj`` None (mpi4py's ``mpibuf(base, count)``)."""
    from ._mpibuffer import buffer  # _mpibuffer imports _buffers, which the ops come before

    return buffer.fromaddress(raw.ctypes.data, raw.nbytes)


def _in_memory(spec):
    """What mpi4py passes a user op for a parsed buffer: its memory from the
    buffer's start, ``count`` times the datatype's extent (a derived
    datatype's bytes where its type map puts them, gaps included)."""
    if spec.target is None:
        return mpibuf(spec.raw)
    from ._mpibuffer import buffer

    tm = spec.datatype._typemap("op")
    start = spec.layout.lo - tm.layout(spec.count).lo  # where element 0's displacement 0 lies
    return buffer.fromaddress(spec.target.ctypes.data + start, spec.count * tm.extent)


class Spread:
    """A user op's operands of a derived datatype as mpi4py passes them:
    ``count * extent`` bytes with the type map's bytes at their places,
    made from the packed bytes the collectives move (``of`` gives None where
    those are the same: one run from displacement 0 with no gap)."""

    __slots__ = ("layout", "low", "nbytes", "span")

    @staticmethod
    def of(datatype, packed: int) -> "Spread | None":
        if not datatype._is_derived():
            return None
        tm = datatype._typemap("op")
        count = packed // tm.size if tm.size else 0
        if not count:
            return None
        layout = tm.layout(count)
        if isinstance(layout, Grid) and not layout.shape and layout.start == 0 and layout.run == count * tm.extent:
            return None
        return Spread(layout, count * tm.extent)

    def __init__(self, layout, nbytes: int):
        self.low = min(0, layout.lo)  # a temporary covers the bytes reached and the bytes passed
        self.layout, self.nbytes = layout.at(-self.low), nbytes
        self.span = max(nbytes, layout.hi + 1) - self.low

    def spread(self, packed: np.ndarray) -> np.ndarray:
        memory = np.zeros(self.span, np.uint8)
        self.layout.scatter(memory, packed, packed.size)
        return memory

    def operand(self, memory: np.ndarray):
        from ._mpibuffer import buffer

        return buffer.fromaddress(memory.ctypes.data - self.low, self.nbytes)

    def pack(self, memory: np.ndarray, dest: np.ndarray) -> None:
        self.layout.gather(memory, out=dest)


def fold_into(op: Op, parts: list[np.ndarray], dest: np.ndarray, datatype, call: str, rank: int,
              spare=()) -> None:
    """Store the rank-order fold of ``parts`` (each rank's bytes, uint8, in
    rank order) with ``op`` into ``dest`` (uint8, as many bytes).

    A user op folds ``inoutbuf = inbuf op inoutbuf`` with ``inoutbuf`` the
    next part: a copy, or the part itself where its index is in ``spare``
    (parts the caller lets the fold overwrite), and ``dest`` on the last
    step, unless the running result is ``dest``'s own memory (the rank's
    in-place input): then the last part if spare, a copy of the result
    else. Other parts are only read."""
    if op._function is None:
        dtype = datatype.dtype
        dest.view(dtype)[...] = fold_arrays(op, [p.view(dtype) for p in parts], datatype, call, rank)
        return
    validate(op, datatype, call, rank)
    spread = Spread.of(datatype, dest.size)
    if spread is not None:  # each operand spread out as the type map places it, then packed again
        acc = spread.spread(parts[0])
        for part in parts[1:]:
            target = spread.spread(part)
            op._function(spread.operand(acc), spread.operand(target), datatype)
            acc = target
        spread.pack(acc, dest)
        return
    acc, last = parts[0], len(parts) - 1
    for j in range(1, last + 1):
        if j < last or (j in spare and np.may_share_memory(acc, dest)):
            target = parts[j] if j in spare else np.array(parts[j], copy=True)
        else:
            if np.may_share_memory(acc, dest):
                acc = acc.copy()  # dest is written before the function reads inbuf
            target = dest
            store_bytes(dest, parts[j])
        op._function(mpibuf(acc), mpibuf(target), datatype)
        acc = target
    store_bytes(dest, acc)


def store_bytes(dest: np.ndarray, src: np.ndarray) -> None:
    """``dest[...] = src``, nothing when they are the same bytes (numpy
    would copy ``src`` to a temporary first: it overlaps ``dest``)."""
    if src.ctypes.data != dest.ctypes.data or src.nbytes != dest.nbytes:
        dest[...] = src


def _fold_loc(key, parts, out):
    better = np.greater if key == "MAXLOC" else np.less
    for part in parts[1:]:
        u, i, v, j = out["value"], out["index"], part["value"], part["index"]
        take = better(v, u) | ((v == u) & (j < i))
        out[take] = part[take]
    return out
