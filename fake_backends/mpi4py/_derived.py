"""Derived datatypes: type maps, their constructors and their queries.

A datatype's *type map* is the list of its basic elements (a predefined
datatype each) with their byte displacements, plus its lower and upper
bounds (``lb``, ``ub``: the extent is ``ub - lb``). ``TypeMap`` keeps it
as numpy arrays: ``codes`` (which basic datatype) and ``offsets`` (bytes),
in type-map order, which is the order of the packed bytes. Compiled once
to ``byte_index`` (the displacement of every byte the type covers), it
packs a buffer as ``raw[index]`` and unpacks as ``raw[index] = packed``:
a receive writes only the bytes the type map covers, and ``count``
elements repeat at the extent, as MPI defines.

The constructors follow MPI 4.0 section 5.1 (vector, hvector, indexed,
hindexed, indexed_block, hindexed_block, struct, subarray, darray,
resized); a struct's extent is rounded up to the alignment of its most
aligned basic element, as Open MPI does. ``contents`` keeps the
constructor's arguments for ``Get_envelope`` and ``Get_contents``. The
grid constructors (contiguous, vector, subarray, darray) remember the map
they made per old map and numbers, so that a type made again shares its
bounds and its grid (``_remembered``).
"""

from __future__ import annotations

import functools
import math
import operator

import numpy as np

from ._errors import ERR_ARG, ERR_TYPE, Exception as MPIException
from ._layouts import Grid, layout_of, regular

# the combiners of MPI (MPI.COMBINER_*), as Open MPI numbers them
NAMED, DUP, CONTIGUOUS, VECTOR, HVECTOR, INDEXED, HINDEXED = 0, 1, 2, 3, 5, 6, 8
INDEXED_BLOCK, HINDEXED_BLOCK, STRUCT, SUBARRAY, DARRAY, RESIZED = 9, 18, 11, 12, 13, 17
F90_INTEGER, F90_REAL, F90_COMPLEX = 16, 14, 15
ORDER_C, ORDER_FORTRAN = 0, 1
DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_NONE, DISTRIBUTE_DFLT_DARG = 0, 1, 2, -1

#: basic datatypes by code: the predefined datatype objects, registered as they are used
BASIC: list = []
_CODES: dict = {}  # a predefined datatype's key -> its code
_MAX_FIELDS = 4096  # a packed element of more mixed basic elements is opaque bytes to numpy


_CACHED_INDEX_BYTES = 1 << 20  # a scattered layout's index is kept for messages up to this size


class TypeMap:
    """The type map of a datatype (see the module docstring). ``contents``
    is ``(combiner, integers, addresses, datatypes)``; ``combiner`` is its
    first item, kept apart as the most asked. The sizes and bounds
    are computed when the type is built; ``codes`` and ``offsets`` only
    when first used (``build``), so that a type of 2**31 bytes costs
    nothing until a call moves it."""

    __slots__ = ("lb", "ub", "align", "contents", "combiner", "committed", "size", "nelem", "true_lb", "true_ub",
                 "uniform", "handles", "_build", "_codes", "_offsets", "_index", "_sizes", "_layouts", "_grid_of",
                 "made_as")

    def __init__(self, lb: int, ub: int, align: int, contents, *, size: int, nelem: int, true_lb: int,
                 true_ub: int, uniform, build=None, codes=None, offsets=None):
        self.lb, self.ub, self.align = int(lb), int(ub), int(align)
        self.contents, self.combiner = contents, contents[0]
        self.committed = False
        self.handles = 0  # the datatype handles on this map (``_typecalls``): freed with the last
        self.size, self.nelem = int(size), int(nelem)
        self.true_lb, self.true_ub = int(true_lb), int(true_ub)
        self.uniform = uniform  # the code of every basic element if they are all one, else None
        self._build = build
        self._codes = None if codes is None else np.asarray(codes, np.int32)
        self._offsets = None if offsets is None else np.asarray(offsets, np.int64)
        self._index = None
        self._sizes = None
        self._layouts = {}  # count -> its layout (see _layouts), the last few used
        self._grid_of = None  # what gives the layout of one element from the constructor's numbers (or None)
        self.made_as = None  # the map a remembered constructor made, which this one copies (``again``)

    def _materialize(self) -> None:
        if self._codes is None:
            codes, offsets = self._build()
            self._codes, self._offsets = np.asarray(codes, np.int32), np.asarray(offsets, np.int64)

    @property
    def codes(self) -> np.ndarray:
        self._materialize()
        return self._codes

    @property
    def offsets(self) -> np.ndarray:
        self._materialize()
        return self._offsets

    def again(self, oldtype) -> "TypeMap":
        """A new map of these elements and bounds, as made by the same
        constructor from ``oldtype`` (a handle on the same old map): the
        bounds and what finds one element's grid are shared; its elements,
        index and layouts (a scattered layout's index can be large), its
        handle count and its commit are its own."""
        tm = TypeMap.__new__(TypeMap)
        tm.lb, tm.ub, tm.align, tm.combiner, tm.size, tm.nelem = self.lb, self.ub, self.align, self.combiner, \
            self.size, self.nelem
        tm.true_lb, tm.true_ub, tm.uniform, tm._build, tm._grid_of = self.true_lb, self.true_ub, self.uniform, \
            self._build, self._grid_of
        tm._codes, tm._offsets, tm._index, tm._sizes, tm._layouts = self._codes, self._offsets, self._index, \
            self._sizes, {}
        combiner, ints, addrs, _ = self.contents
        tm.contents, tm.committed, tm.handles = (combiner, list(ints), list(addrs), [oldtype]), False, 0
        tm.made_as = self
        return tm

    def moved(self, lb: int, ub: int, contents) -> "TypeMap":
        """The same elements with other bounds (Create_resized, Dup)."""
        tm = TypeMap(lb, ub, self.align, contents, size=self.size, nelem=self.nelem, true_lb=self.true_lb,
                     true_ub=self.true_ub, uniform=self.uniform, build=lambda: (self.codes, self.offsets))
        tm._index = self._index
        tm._grid_of = lambda: self.layout(1)
        return tm

    @property
    def extent(self) -> int:
        return self.ub - self.lb

    @property
    def true_extent(self) -> int:
        return self.true_ub - self.true_lb

    @property
    def envelope(self) -> tuple[int, int, int, int, int]:
        """``(ni, na, nc, nd, combiner)`` as Open MPI gives them (no large counts)."""
        combiner, ints, addrs, types = self.contents
        return len(ints), len(addrs), 0, len(types), combiner

    @property
    def sizes(self) -> np.ndarray:
        """The size in bytes of each basic element."""
        if self._sizes is None:
            table = np.array([b.Get_size() for b in BASIC] or [0], np.int64)
            self._sizes = table[self.codes]
        return self._sizes

    def true_bounds(self) -> tuple[int, int]:
        return self.true_lb, self.true_ub

    def byte_index(self, count: int = 1) -> np.ndarray:
        """The displacement of every byte of ``count`` elements, in packed order."""
        if self._index is None:
            sizes = self.sizes
            starts = np.cumsum(sizes) - sizes
            within = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts, sizes)
            self._index = np.repeat(self.offsets, sizes) + within
        if count == 1:
            return self._index
        return (np.arange(count, dtype=np.int64)[:, None] * self.extent + self._index[None, :]).reshape(-1)

    def layout(self, count: int = 1):
        """Where the bytes of ``count`` elements lie, from displacement 0 (see ``_layouts``)."""
        found = self._layouts.get(count)
        if found is None:
            found = self._known_grid(count) if self.size and count else None
            if found is None:
                found = layout_of(self.byte_index(count))
            if isinstance(found, Grid) or found.nbytes <= _CACHED_INDEX_BYTES:  # a grid is a few numbers
                if len(self._layouts) >= 8:
                    self._layouts.clear()
                self._layouts[count] = found
        return found

    def _known_grid(self, count: int) -> Grid | None:
        """The layout of ``count`` elements where it is a grid known without
        the byte index: one element's from its constructor, ``count`` of
        them as one more dimension at the extent."""
        if count == 1:
            one = self._grid_of() if self._grid_of is not None else None
            return one if isinstance(one, Grid) else None
        one = self.layout(1)
        if not isinstance(one, Grid):
            return None
        return regular(one.start, (count, *one.shape), (self.extent, *one.strides), one.run)

    def basic_dtype(self):
        """The numpy dtype of the basic elements if they are all of one datatype, else None."""
        return BASIC[self.uniform].dtype if self.uniform is not None else None

    def packed_dtype(self) -> np.dtype:
        """The numpy dtype of one packed element: the basic elements' if they
        are all of one kind, else a record of them (opaque bytes past
        ``_MAX_FIELDS`` of them)."""
        basic = self.basic_dtype()
        if basic is not None:
            return basic
        if not 0 < self.nelem <= _MAX_FIELDS:
            return np.dtype((np.void, max(self.size, 1)))
        starts = np.cumsum(self.sizes) - self.sizes
        return np.dtype({"names": [f"f{k}" for k in range(self.nelem)],
                         "formats": [BASIC[int(c)].dtype for c in self.codes],
                         "offsets": [int(x) for x in starts], "itemsize": self.size})

    def elements(self, nbytes: int) -> int | None:
        """How many basic elements ``nbytes`` packed bytes hold (None: not a whole number)."""
        size = self.size
        if size == 0:
            return 0 if nbytes == 0 else None
        whole, rest = divmod(nbytes, size)
        if rest == 0:
            return whole * self.nelem
        hit = np.flatnonzero(np.cumsum(self.sizes) == rest)
        return whole * self.nelem + int(hit[0]) + 1 if hit.size else None


def basic_map(datatype) -> TypeMap:
    """The type map of a predefined datatype: one element at displacement 0."""
    key = datatype._key
    code = _CODES.get(key)
    if code is None:
        code = _CODES[key] = len(BASIC)
        BASIC.append(datatype)
    size = datatype.Get_size()
    align = datatype._dtype.alignment if datatype._dtype is not None else 1
    tm = TypeMap(0, size, align, (NAMED, [], [], []), size=size, nelem=1, true_lb=0, true_ub=size,
                 uniform=code, codes=[code], offsets=[0])
    tm._grid_of = lambda: Grid(0, (), (), size)
    return tm


def _ints(values, what: str) -> list[int]:
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise TypeError(f"{what}: expecting a sequence of integers") from None


def _nonneg(value, what: str, call: str) -> int:
    value = operator.index(value)
    if value < 0:
        raise MPIException(ERR_ARG, f"Datatype.{call}: {what}={value} is negative")
    return value


_FEW = 32  # blocks of one datatype from which numpy computes the bounds faster than a loop


def _blocks(olds, starts, lengths, contents) -> TypeMap:
    """Block ``j``: ``lengths[j]`` copies of ``olds[j]`` (or of ``olds``,
    one TypeMap for every block) from byte ``starts[j]``, at its extent."""
    one = isinstance(olds, TypeMap)
    kinds = ({id(olds): olds} if len(starts) else {}) if one else {id(o): o for o in olds}
    align = max([1] + [old.align for old in kinds.values()])
    per_block = [olds] * len(starts) if one else list(olds)
    if one and len(starts) >= _FEW:
        bounds, build = _repeated_bounds(olds, np.asarray(starts, np.int64), np.asarray(lengths, np.int64))
    else:
        starts = starts.tolist() if isinstance(starts, np.ndarray) else list(starts)
        lengths = lengths.tolist() if isinstance(lengths, np.ndarray) else list(lengths)
        bounds, build = _listed_bounds(per_block, starts, lengths)
    tm = _map(bounds, align, contents, build)
    if len(starts) <= _JOINED_BLOCKS:
        tm._grid_of = lambda: _joined_layout(per_block, list(starts), list(lengths))
    return tm


#: Blocks of an indexed or struct type whose grids ``_joined_layout`` tries to join (more: the byte index)
_JOINED_BLOCKS = 1024


def _joined_layout(olds: list, starts: list, lengths: list) -> Grid | None:
    """The layout of ``_blocks``'s blocks where they join into one grid
    without a byte index: runs that continue each other (a large count
    split into a vector and a remainder, as libraries beyond 2**31
    elements build them), or equal grids at evenly stepped starts.
    Else None: found from the byte index."""
    grids = []
    for old, start, length in zip(olds, starts, lengths):
        if length <= 0 or not old.size:
            continue
        inner = old.layout(1)
        if not isinstance(inner, Grid):
            return None
        grids.append(regular(int(start) + inner.start, (int(length), *inner.shape), (old.extent, *inner.strides),
                             inner.run))
    if not grids:
        return None
    if all(not g.shape for g in grids) and all(a.start + a.run == b.start for a, b in zip(grids, grids[1:])):
        return Grid(grids[0].start, (), (), sum(g.run for g in grids))
    first = grids[0]
    step = grids[1].start - first.start if len(grids) > 1 else 0
    if all((g.shape, g.strides, g.run) == (first.shape, first.strides, first.run) and g.start == first.start + j * step
           for j, g in enumerate(grids)):
        return regular(first.start, (len(grids), *first.shape), (step, *first.strides), first.run)
    return None


def _map(bounds, align: int, contents, build) -> TypeMap:
    """The TypeMap of ``bounds`` ``(lb, ub, size, nelem, true_lb, true_ub,
    uniform)``, or of no element at all (None)."""
    if bounds is None:
        return TypeMap(0, 0, align, contents, size=0, nelem=0, true_lb=0, true_ub=0, uniform=None,
                       codes=[], offsets=[])
    lb, ub, size, nelem, true_lb, true_ub, uniform = bounds
    return TypeMap(lb, ub, align, contents, size=size, nelem=nelem, true_lb=true_lb, true_ub=true_ub,
                   uniform=uniform, build=build)


def _copies_bounds(old: TypeMap, low: int, high: int, copies: int) -> tuple:
    """The bounds (as ``_map`` takes them) of ``copies`` copies of ``old``
    whose first bytes lie from ``low`` to ``high``."""
    filled = old.nelem > 0
    return (low + min(old.lb, old.ub), high + max(old.lb, old.ub), copies * old.size, copies * old.nelem,
            low + old.true_lb if filled else 0, high + old.true_ub if filled else 0,
            old.uniform if filled else None)


def _listed_bounds(kinds: list, starts: list, lengths: list):
    """``(lb, ub, size, nelem, true_lb, true_ub, uniform)`` of blocks of
    any datatypes, block by block in Python (None: no block has a copy),
    and the function that builds their codes and offsets."""
    lb = ub = true_lb = true_ub = None
    size = nelem = 0
    uniforms = set()
    kept = []
    for old, start, length in zip(kinds, starts, lengths):
        if length <= 0:
            continue
        kept.append((old, start, length))
        last = (length - 1) * (old.ub - old.lb)
        low, high = start + min(0, last), start + max(0, last)
        lo, hi = low + min(old.lb, old.ub), high + max(old.lb, old.ub)
        lb, ub = lo if lb is None else min(lb, lo), hi if ub is None else max(ub, hi)
        size, nelem = size + length * old.size, nelem + length * old.nelem
        if old.nelem > 0:
            uniforms.add(old.uniform)
            lo, hi = low + old.true_lb, high + old.true_ub
            true_lb, true_ub = lo if true_lb is None else min(true_lb, lo), hi if true_ub is None else max(true_ub, hi)
    if not kept:
        return None, None
    uniform = uniforms.pop() if len(uniforms) == 1 else None

    def build():
        codes, offsets = [], []
        for old, start, length in kept:
            disp = start + np.arange(length, dtype=np.int64) * old.extent
            codes.append(np.tile(old.codes, length))
            offsets.append((disp[:, None] + old.offsets[None, :]).reshape(-1))
        return np.concatenate(codes), np.concatenate(offsets)

    if true_lb is None:  # no block has a basic element
        true_lb = true_ub = 0
    return (lb, ub, size, nelem, true_lb, true_ub, uniform), build


def _repeated_bounds(old: TypeMap, starts: np.ndarray, lengths: np.ndarray):
    """``_listed_bounds`` of many blocks of one datatype, with numpy."""
    keep = lengths > 0
    if not keep.any():
        return None, None
    starts, lengths = starts[keep], lengths[keep]
    last = (lengths - 1) * old.extent
    low, high = int((starts + np.minimum(0, last)).min()), int((starts + np.maximum(0, last)).max())
    copies = int(lengths.sum())
    bounds = _copies_bounds(old, low, high, copies)

    def build():
        first = np.cumsum(lengths) - lengths  # the index of each block's first copy
        within = np.arange(copies, dtype=np.int64) - np.repeat(first, lengths)  # each copy's index in its block
        disp = np.repeat(starts, lengths) + within * old.extent
        return np.tile(old.codes, copies), (disp[:, None] + old.offsets[None, :]).reshape(-1)

    return bounds, build


def _grid(old: TypeMap, axes: list, strides: list[int], blocks: int, contents) -> TypeMap:
    """Copies of ``old``, one at byte ``sum(i[k] * strides[k])`` for every
    ``i[k]`` of ``axes[k]`` (an ascending range or array of integers), the
    last axis fastest: the type map of a contiguous, vector, subarray or
    darray type, as ``_blocks`` gives it with ``blocks`` blocks. The bounds
    come from the grid's corners, so a type of many elements costs nothing
    until a call moves it."""
    align = old.align if blocks else 1
    copies = math.prod(len(axis) for axis in axes)
    if not copies:
        return _map(None, align, contents, None)
    low = high = 0
    for axis, stride in zip(axes, strides):
        first, last = (axis[0], axis[-1]) if isinstance(axis, range) else (int(axis.min()), int(axis.max()))
        low, high = low + min(first * stride, last * stride), high + max(first * stride, last * stride)

    def build():
        disp = np.zeros(1, np.int64)
        for axis, stride in zip(axes, strides):
            values = np.arange(axis.start, axis.stop, dtype=np.int64) if isinstance(axis, range) else axis
            disp = (disp[:, None] + values * stride).reshape(-1)
        return np.tile(old.codes, copies), (disp[:, None] + old.offsets[None, :]).reshape(-1)

    tm = _map(_copies_bounds(old, low, high, copies), align, contents, build)
    tm._grid_of = lambda: _grid_layout(old, axes, strides)
    return tm


def _grid_layout(old: TypeMap, axes: list, strides: list[int]) -> Grid | None:
    """The layout of ``_grid``'s copies where each axis is evenly spaced and
    ``old`` is a grid itself (else None: found from the byte index)."""
    inner = old.layout(1)
    if not isinstance(inner, Grid):
        return None
    start, shape, steps = inner.start, [], []
    for axis, stride in zip(axes, strides):
        if isinstance(axis, range):
            first, n, step = axis.start, len(axis), axis.step
        else:
            gaps = np.unique(np.diff(axis))
            if gaps.size > 1:
                return None
            first, n, step = int(axis[0]), len(axis), int(gaps[0]) if gaps.size else 1
        start += first * stride
        shape.append(n)
        steps.append(step * stride)
    return regular(start, (*shape, *inner.shape), (*steps, *inner.strides), inner.run)


_MADE: dict = {}  # (constructor, old map, its numbers) -> the map it made
_MADE_LIMIT = 256


def _numbers_key(value):
    if type(value) is list or type(value) is tuple or (type(value) is np.ndarray and value.ndim == 1):
        return tuple(map(operator.index, value))
    return operator.index(value)


def _remembered(make):
    """``make(old, oldtype, *numbers)`` run once per old map and numbers:
    a library that makes the same types again and again (a parallel FFT's
    subarrays, per transform) gets a new map sharing what the first one
    computed, one element's grid above all. Numbers that are not integers
    (or lists of them) are left to ``make`` to refuse; a call that raises
    keeps nothing."""
    def constructor(old: TypeMap, oldtype, *numbers) -> TypeMap:
        try:
            key = (make, old, *map(_numbers_key, numbers))
        except TypeError:
            return make(old, oldtype, *numbers)
        made = _MADE.get(key)
        if made is None:
            made = make(old, oldtype, *numbers)
            if made._grid_of is not None:
                made._grid_of = functools.cache(made._grid_of)  # a grid (a few numbers) or None, found once
            made.contents = (*made.contents[:3], [])  # no handle of the user's kept (the leak checks see it go)
            if len(_MADE) >= _MADE_LIMIT:
                _MADE.clear()
            _MADE[key] = made  # never handed out: ``again`` copies it
        return made.again(oldtype)

    constructor.__name__, constructor.__doc__ = make.__name__, make.__doc__
    return constructor


@_remembered
def contiguous(old: TypeMap, oldtype, count) -> TypeMap:
    count = _nonneg(count, "count", "Create_contiguous")
    return _grid(old, [range(count)], [old.extent], 1, (CONTIGUOUS, [count], [], [oldtype]))


@_remembered
def vector(old: TypeMap, oldtype, count, blocklength, stride, in_bytes: bool) -> TypeMap:
    call = "Create_hvector" if in_bytes else "Create_vector"
    count, blocklength = _nonneg(count, "count", call), _nonneg(blocklength, "blocklength", call)
    stride = operator.index(stride)
    step = stride if in_bytes else stride * old.extent
    if in_bytes:
        contents = (HVECTOR, [count, blocklength], [stride], [oldtype])
    else:
        contents = (VECTOR, [count, blocklength, stride], [], [oldtype])
    return _grid(old, [range(count), range(blocklength)], [step, old.extent], count, contents)


def indexed(old: TypeMap, oldtype, blocklengths, displacements, in_bytes: bool, block: int | None) -> TypeMap:
    name = ("Create_hindexed" if in_bytes else "Create_indexed") + ("_block" if block is not None else "")
    displs = _ints(displacements, f"Datatype.{name}: displacements")
    if block is None:
        lengths = [_nonneg(b, "blocklength", name) for b in _ints(blocklengths, f"Datatype.{name}: blocklengths")]
        if len(lengths) != len(displs):
            raise ValueError(f"Datatype.{name}: expecting {len(lengths)} displacements, got {len(displs)}")
    else:
        lengths = [_nonneg(block, "blocklength", name)] * len(displs)
    starts = displs if in_bytes else [d * old.extent for d in displs]
    n = len(displs)
    if block is None and in_bytes:
        contents = (HINDEXED, [n, *lengths], displs, [oldtype])
    elif block is None:
        contents = (INDEXED, [n, *lengths, *displs], [], [oldtype])
    elif in_bytes:
        contents = (HINDEXED_BLOCK, [n, block], displs, [oldtype])
    else:
        contents = (INDEXED_BLOCK, [n, block, *displs], [], [oldtype])
    return _blocks(old, starts, lengths, contents)


def struct(olds: list[TypeMap], oldtypes, blocklengths, displacements) -> TypeMap:
    lengths = [_nonneg(b, "blocklength", "Create_struct") for b in _ints(blocklengths, "Datatype.Create_struct")]
    displs = _ints(displacements, "Datatype.Create_struct: displacements")
    if not len(lengths) == len(displs) == len(olds):
        raise ValueError(f"Datatype.Create_struct: {len(lengths)} blocklengths, {len(displs)} displacements and "
                         f"{len(olds)} datatypes; expecting as many of each")
    tm = _blocks(olds, displs, lengths, (STRUCT, [len(lengths), *lengths], displs, list(oldtypes)))
    tm.ub = tm.lb + -(-tm.extent // tm.align) * tm.align  # padded to the alignment, as Open MPI does
    return tm


def _memory_strides(sizes: list[int], extent: int) -> list[int]:
    """The byte stride of each dimension of an array of ``sizes`` (C order) of elements of ``extent`` bytes."""
    return [math.prod(sizes[k + 1:]) * extent for k in range(len(sizes))]


@_remembered
def subarray(old: TypeMap, oldtype, sizes, subsizes, starts, order) -> TypeMap:
    call = "Create_subarray"
    sizes, subsizes = _ints(sizes, f"Datatype.{call}: sizes"), _ints(subsizes, f"Datatype.{call}: subsizes")
    starts = _ints(starts, f"Datatype.{call}: starts")
    order = operator.index(order)
    if not len(sizes) == len(subsizes) == len(starts) or not sizes:
        raise ValueError(f"Datatype.{call}: sizes, subsizes and starts must have the same length (>= 1)")
    if order not in (ORDER_C, ORDER_FORTRAN):
        raise MPIException(ERR_ARG, f"Datatype.{call}: order={order}; expecting MPI.ORDER_C or MPI.ORDER_FORTRAN")
    for size, sub, start in zip(sizes, subsizes, starts):
        if size < 1 or sub < 1 or start < 0 or start + sub > size:
            raise MPIException(ERR_ARG, f"Datatype.{call}: subsize {sub} at start {start} does not fit in size {size}")
    n = len(sizes)
    contents = (SUBARRAY, [n, *sizes, *subsizes, *starts, order], [], [oldtype])
    axes = [range(start, start + sub) for sub, start in zip(subsizes, starts)]
    strides = _memory_strides(sizes[::-1] if order == ORDER_FORTRAN else sizes, old.extent)
    tm = _grid(old, axes[::-1] if order == ORDER_FORTRAN else axes, strides, math.prod(subsizes), contents)
    tm.lb, tm.ub = old.lb, old.lb + math.prod(sizes) * old.extent
    return tm


def _darray_block(gsize: int, distrib: int, darg: int, psize: int, coord: int, call: str) -> np.ndarray:
    """The global indices of one dimension that process ``coord`` owns."""
    if distrib == DISTRIBUTE_NONE:
        return np.arange(gsize, dtype=np.int64)
    if distrib == DISTRIBUTE_BLOCK:
        block = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        if block * psize < gsize:
            raise MPIException(ERR_ARG, f"Datatype.{call}: block size {block} x {psize} processes < {gsize}")
        return np.arange(coord * block, min(gsize, (coord + 1) * block), dtype=np.int64)
    if distrib == DISTRIBUTE_CYCLIC:
        block = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
        every = np.arange(gsize, dtype=np.int64)
        return every[(every // block) % psize == coord]
    raise MPIException(ERR_ARG, f"Datatype.{call}: distribution {distrib} is not MPI.DISTRIBUTE_*")


@_remembered
def darray(old: TypeMap, oldtype, size, rank, gsizes, distribs, dargs, psizes, order) -> TypeMap:
    call = "Create_darray"
    size, rank, order = operator.index(size), operator.index(rank), operator.index(order)
    gsizes, distribs = _ints(gsizes, call), _ints(distribs, call)
    dargs, psizes = _ints(dargs, call), _ints(psizes, call)
    n = len(gsizes)
    if not len(distribs) == len(dargs) == len(psizes) == n or math.prod(psizes) != size or not 0 <= rank < size:
        raise MPIException(ERR_ARG, f"Datatype.{call}: size={size}, rank={rank}, psizes={psizes} do not agree")
    coords, rest = [], rank  # process grid in C order, as MPI defines it for darray
    for k in range(n):
        below = math.prod(psizes[k + 1:])
        coords.append(rest // below)
        rest %= below
    dims = [_darray_block(gsizes[k], distribs[k], dargs[k], psizes[k], coords[k], call) for k in range(n)]
    full, owned = (gsizes[::-1], dims[::-1]) if order == ORDER_FORTRAN else (gsizes, dims)
    contents = (DARRAY, [size, rank, n, *gsizes, *distribs, *dargs, *psizes, order], [], [oldtype])
    tm = _grid(old, owned, _memory_strides(full, old.extent), math.prod(len(mine) for mine in owned), contents)
    tm.lb, tm.ub = old.lb, old.lb + math.prod(gsizes) * old.extent
    return tm


def resized(old: TypeMap, oldtype, lb, extent) -> TypeMap:
    lb, extent = operator.index(lb), operator.index(extent)
    return old.moved(lb, lb + extent, (RESIZED, [], [lb, extent], [oldtype]))


def dup(old: TypeMap, oldtype) -> TypeMap:
    return old.moved(old.lb, old.ub, (DUP, [], [], [oldtype]))


def f90(old: TypeMap, combiner: int, ints: list) -> TypeMap:
    """A Fortran 90 parameterized type: ``old``'s type map, the contents of ``combiner`` (committed, as MPI's)."""
    tm = old.moved(old.lb, old.ub, (combiner, list(ints), [], []))
    tm.committed = True
    return tm


def check_type(tm: TypeMap | None, name: str, call: str) -> TypeMap:
    if tm is None:
        raise MPIException(ERR_TYPE, f"Datatype.{call} of {name}, which is freed or null")
    return tm
