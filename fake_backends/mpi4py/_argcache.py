"""The parsed buffer arguments of Alltoallv and Alltoallw, kept for the
calls that repeat them.

A parallel FFT calls the same transposes again and again: the same arrays
(or new arrays of the same shape), the same counts and displacements, the
same committed datatypes. Parsing a buffer argument (``_buffers``) costs
more than the exchange of a small call, so the blocks a parse yields are
kept, under a key made of everything the parse reads:

- the buffer, an ``ndarray`` of exactly that type (memory known by its
  address, an ``MPI.buffer`` or another exporter is parsed every time):
  its shape, strides and dtype, and for a receive whether it is writable.
  Neither its address nor its identity: a hit places the kept layouts in
  the memory of the array passed now, so a new array (at the same address
  or not) with the same layout gets the same blocks, and one with another
  layout another key;
- the counts and displacements, as ints: ``None``, an ``int``, or a list,
  tuple or 1-D integer array of them (anything else, a numpy integer
  scalar say, is parsed every time). A list the program changes between
  calls gives a new key;
- each datatype: a predefined one by its name, a derived one (live and
  committed, else the parse's error comes) by the map its constructor
  remembered (``TypeMap.made_as``: a new handle on the same constructor's
  numbers, as a library that makes its transposes' types per plan has,
  finds the parse of the first) or else by its handle (``Datatype._id``,
  an object the key holds, so it cannot be reused while kept); or a type code;
- the call, the argument, the number of blocks.

A handle freed becomes ``MPI.DATATYPE_NULL``, another key; another handle
on a freed type map (``MPI.Datatype(dt)``) makes no key, so the parse
refuses it. A parse that raises keeps nothing. What is kept holds no
memory of the program's and no handle: layouts (``_layouts``) and counts;
at most ``LIMIT`` keys, all dropped when full. A parse is kept the second time
its key comes, so a call made once costs no keeping. Blocks of at most
``ROWS_UP_TO`` bytes (``ROWS_COMPILED_UP_TO`` where the compiled path is
built) that are the rows of one strided array (a transpose's are) are kept
as that array's shape too, so that one copy moves them all.

``template`` gives the compiled path (``simdist.sim._repeated``) the
leaves it compares a later call's arguments with, keyed as here.
"""

from __future__ import annotations

import operator

import numpy as np

from simdist.sim import _repeated as _compiled_path

from ._typecalls import _MAPS
from ._buffers import BufSpec, _items, parse_vector, parse_w
from ._datatypes import Datatype, lookup, of_array
from ._derived import _CACHED_INDEX_BYTES as INDEX_BYTES
from ._layouts import Grid, stepped_rows

LIMIT = 64
#: Blocks up to this many bytes are kept as rows too (``_layouts.stepped_rows``),
#: to move all at once: beyond, the second copy that a rank's block to itself
#: takes through its row (one copy by itself) outweighs the calls that moving
#: each block takes.
ROWS_UP_TO = 16 << 10
#: ... and up to this many where the compiled path (``simdist.sim._repeated``)
#: moves them: it pays no call per block, so the second copy of a rank's block
#: to itself outweighs moving the blocks apart only further on (at 2 ranks:
#: N = 32 subarray transposes of 128 KiB blocks 27 against 66 us a call,
#: N = 128 vector ones of 32 KiB 15 against 44).
ROWS_COMPILED_UP_TO = 128 << 10

_kept: dict = {}
_index = operator.index


class _Refused(Exception):
    """An argument this cache does not key: parse it every time."""


def _ints(values):
    """A key of counts or displacements (see the module docstring)."""
    if values is None:
        return None
    kind = type(values)
    if kind is int:
        return values
    if kind is list or kind is tuple or (kind is np.ndarray and values.ndim == 1 and values.dtype.kind in "iu"):
        return tuple(map(_index, values))  # TypeError for a float
    raise _Refused


def _type(datatype):
    if isinstance(datatype, Datatype):
        tm = _MAPS.get(datatype._id)
        if tm is None:
            if datatype._id == datatype._key:  # predefined (or null)
                return datatype._id
            raise _Refused  # freed: the parse raises
        if not tm.committed:
            raise _Refused
        return tm.made_as or datatype._id
    if type(datatype) is str:
        return ("code", datatype)
    raise _Refused


def _buffer(buf, writable: bool) -> tuple:
    if type(buf) is not np.ndarray:
        raise _Refused
    return (buf.shape, buf.strides, buf.dtype, buf.flags.writeable if writable else True)


def _memory(buf: np.ndarray) -> np.ndarray:
    """The array's bytes in memory order (as ``_buffers.memory_bytes``)."""
    return buf.reshape(-1, order="A").view(np.uint8) if buf.size else np.empty(0, np.uint8)


class _Plan:
    """The blocks of one key without the memory or the datatypes: ``(count,
    layout)`` of a derived datatype's block, ``(count, (lo, hi))`` of a basic
    one's bytes ``lo:hi``; and each block's length in bytes. It holds no
    datatype handle: the handle-leak check sees the program drop one."""

    __slots__ = ("blocks", "nbytes", "c_order", "rows")

    def __init__(self, parts: list[BufSpec], buf: np.ndarray):
        memory = _memory(buf)  # the bytes the parse read, so the same offsets
        base = memory.ctypes.data if memory.size else 0
        blocks = []
        for part in parts:
            if part.raw is None:
                blocks.append((part.count, part.layout))
            else:
                lo = part.raw.ctypes.data - base if part.raw.size else 0
                blocks.append((part.count, (lo, lo + part.raw.size)))
        self.blocks = blocks
        self.nbytes = [part.nbytes for part in parts]
        self.c_order = buf.flags.c_contiguous  # as the key's shape, strides and dtype say
        small = self.nbytes and self.nbytes[0] <= (ROWS_COMPILED_UP_TO if _compiled_path.available() else ROWS_UP_TO)
        self.rows = stepped_rows([where for _, where in blocks]) if small else None

    def parts(self, buf: np.ndarray, datatypes: list) -> tuple[list[BufSpec], np.ndarray | None]:
        """The blocks in the memory of ``buf``, of ``datatypes`` (one per
        block), and the blocks as the rows of one array where they are
        small and are such rows (``_layouts.stepped_rows``), else None."""
        rows = self.rows
        if rows is None:
            return self.blocks_in(buf, datatypes), None
        memory = buf if self.c_order else _memory(buf)  # a C-ordered array's buffer is its bytes in order
        return _Parts(self, buf, datatypes), np.ndarray(rows[0], rows[1], memory, rows[2], rows[3])

    def blocks_in(self, buf: np.ndarray, datatypes: list) -> list[BufSpec]:
        memory = np.frombuffer(buf, np.uint8) if self.c_order else _memory(buf)
        return [BufSpec(None, datatype, count, memory, where) if type(where) is not tuple
                else BufSpec(memory[where[0]:where[1]], datatype, count)
                for datatype, (count, where) in zip(datatypes, self.blocks)]


class _Parts:
    """The blocks of a kept parse, made at their first use: a call that
    moves its blocks as the rows of one array never uses them."""

    __slots__ = ("_plan", "_buf", "_datatypes", "_parts")

    def __init__(self, plan: _Plan, buf: np.ndarray, datatypes: list):
        self._plan, self._buf, self._datatypes, self._parts = plan, buf, datatypes, None

    def _list(self) -> list[BufSpec]:
        if self._parts is None:
            self._parts = self._plan.blocks_in(self._buf, self._datatypes)
        return self._parts

    def __getitem__(self, j: int) -> BufSpec:
        return self._list()[j]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self):
        return iter(self._list())


def _keep(key, parts: list[BufSpec], buf) -> None:
    """Keep the parse the second time its key is parsed (the first time only
    the key: a call made once pays for no keeping), unless it holds a large
    byte index (a scattered layout's, as ``TypeMap.layout`` keeps)."""
    if key not in _kept:
        if len(_kept) >= LIMIT:
            _kept.clear()
        _kept[key] = None  # seen once
    elif not any(part.raw is None and not isinstance(part.layout, Grid) and part.layout.nbytes > INDEX_BYTES
                 for part in parts):
        _kept[key] = _Plan(parts, buf)


def vector_parts(spec, *, writable: bool, blocks: int, what: str) -> tuple[list[BufSpec], list[int], np.ndarray | None]:
    """``parse_vector(spec, ..., direct=True).parts()``, the blocks'
    lengths in bytes, and where what is kept has them as the rows of one
    array, that array (else None); from what is kept where the key is."""
    o_buf, o_counts, o_displs, o_type = _items(spec, tuple, what)
    try:
        key = ("v", what, writable, blocks, _buffer(o_buf, writable), _ints(o_counts), _ints(o_displs),
               None if o_type is None else _type(o_type))
    except (_Refused, TypeError):
        key = None
    plan = None if key is None else _kept.get(key)
    if plan is None:
        parts = parse_vector(spec, writable=writable, blocks=blocks, what=what, direct=True).parts()
        if key is not None:
            _keep(key, parts, o_buf)
        return parts, [part.nbytes for part in parts], None
    datatype = of_array(o_buf) if o_type is None else lookup(o_type)
    parts, rows = plan.parts(o_buf, [datatype] * blocks)
    return parts, plan.nbytes, rows


def w_parts(spec, n: int, *, writable: bool, what: str) -> tuple[list[BufSpec], list[int], np.ndarray | None]:
    """``parse_w(spec, n, ..., direct=True)``, the blocks' lengths in bytes
    and their rows, as ``vector_parts``."""
    key = types = buf = None
    if (type(spec) is list or type(spec) is tuple) and 2 <= len(spec) <= 4:
        try:
            if len(spec) == 2:
                buf, types = spec
                counts = displs = None
            elif len(spec) == 3:
                buf, (counts, displs), types = spec
            else:
                buf, counts, displs, types = spec
            kind = type(types)
            key = ("w", what, writable, n, _buffer(buf, writable), _ints(counts), _ints(displs),
                   tuple(map(_type, types)) if kind is list or kind is tuple else ("one", _type(types)))
        except (_Refused, TypeError, ValueError):
            key = None
    plan = None if key is None else _kept.get(key)
    if plan is None:
        parts = parse_w(spec, n, writable=writable, what=what, direct=True)
        if key is not None:
            _keep(key, parts, buf)
        return parts, [part.nbytes for part in parts], None
    datatypes = [types] * n if isinstance(types, Datatype) else list(map(lookup, types))  # as parse_w reads them
    parts, rows = plan.parts(buf, datatypes)
    return parts, plan.nbytes, rows


# -- the template of a repeated call's arguments (``simdist.sim._repeated``) --------------------

#: A template's leaves: a list or tuple (its type and length), the buffer,
#: an int (its value), None, a datatype (its key, as ``_type``'s, and the class).
_SEQ, _BUFFER, _INT, _NONE, _TYPE = 1, 2, 3, 4, 5


def template(spec) -> tuple[list, np.ndarray] | None:
    """The leaves that ``simdist.sim._compiled`` compares a later call's
    argument with, walking it as this does (lists and tuples in order, at
    most three deep), and the argument's buffer; None where an argument has
    something else than one ``ndarray``, ints, committed datatypes and None
    (a numpy integer, an array of counts, a type code), which the compiled
    path leaves to the parse. A datatype is known by the parse's key: a new
    handle on a map made again matches, and no handle is held."""
    leaves, buffers = [], []

    def walk(obj, depth: int) -> None:
        kind = type(obj)
        if kind is list or kind is tuple:
            if depth >= 3:
                raise _Refused
            leaves.append((_SEQ, kind, None, len(obj)))
            for item in obj:
                walk(item, depth + 1)
        elif kind is np.ndarray and not buffers:
            buffers.append(obj)
            leaves.append((_BUFFER, None, None, 0))
        elif kind is int:
            leaves.append((_INT, None, None, obj))
        elif isinstance(obj, Datatype):
            leaves.append((_TYPE, _type(obj), Datatype, 0))
        elif obj is None:
            leaves.append((_NONE, None, None, 0))
        else:
            raise _Refused

    try:
        walk(spec, 0)
    except (_Refused, TypeError):
        return None
    return (leaves, buffers[0]) if buffers else None
