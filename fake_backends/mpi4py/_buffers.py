"""Buffer specifications, as mpi4py reads them.

A buffer argument of the uppercase API is one of::

    buf                                  a numpy array or any buffer (bytes, bytearray, array.array, ...),
                                         or an object with __dlpack__ or __cuda_array_interface__ on
                                         host memory (``_interfaces``)
    [buf, datatype]                      datatype: an MPI.Datatype or a type code such as "d" or "B"
    [buf, count]  /  [buf, (count, displ)]
    [buf, count, datatype]  /  [buf, (count, displ), datatype]
    [buf, count, displ, datatype]

with ``None`` (or ``MPI.BOTTOM``) for an empty buffer, as in ``[None, "B"]``.
The datatype defaults to the buffer's own (its dtype), the count to the
number of elements that fit (divided by the number of blocks where the
call has one block per rank, as Gather's receive buffer), the displacement
to 0. Counts and displacements count elements of the datatype. The buffer
must be contiguous (C or Fortran order); its bytes are read in memory
order, as MPI reads memory. Unlike MPI, a count larger than the buffer is
an error here, not a read past its end.
"""

from __future__ import annotations

import operator

import numpy as np

from simdist._arguments import DTYPE_CODE

from ._datatypes import Datatype, lookup, of_array, of_format
from ._errors import ERR_TYPE, Exception as MPIException
from ._interfaces import memory
from ._addressed import absolute_memory, beyond_claim, claimed_only, placed
from ._layouts import Blocks, Grid
from ._unpacking import register


from ._bufferexport import (BOTTOM, BUFFER_AUTOMATIC, IN_PLACE, BottomType,  # noqa: E402,F401 - MPI's names
                            BufferAutomaticType, BufferConstant, InPlaceType)


def is_in_place(spec) -> bool:
    """MPI.IN_PLACE (mpi4py also reads None as IN_PLACE where it is allowed)."""
    return spec is None or spec is IN_PLACE


def Get_address(location) -> int:
    """The address of a buffer's first byte (0 for ``MPI.BOTTOM`` and None),
    read as messages are (buffer protocol, DLPack, CUDA array interface)."""
    if isinstance(location, BufferConstant):
        return int(location)
    raw, _ = memory_bytes(location, False, "location")
    return raw.ctypes.data if raw.size else _empty_address(location)


def _empty_address(location) -> int:
    if isinstance(location, np.ndarray) and getattr(location, "_address", None) is not None:
        return location._address  # an empty MPI.buffer has the address it was made with (0: NULL)
    try:
        return np.frombuffer(location, np.uint8).ctypes.data
    except (TypeError, ValueError):
        return 0


def Aint_add(base: int, disp: int) -> int:
    """``base + disp``, an address."""
    return operator.index(base) + operator.index(disp)


def Aint_diff(addr1: int, addr2: int) -> int:
    """``addr1 - addr2``, a displacement."""
    return operator.index(addr1) - operator.index(addr2)


class BufSpec:
    """A parsed buffer: ``raw`` (uint8 view of the bytes the call reads or
    writes), ``datatype`` and ``count`` (elements per block).

    For a derived datatype ``raw`` is the packed bytes (a copy, in type-map
    order) of the bytes of ``target``, the buffer's memory, that ``layout``
    places (see ``_layouts``); ``store()`` writes them back (see
    ``_unpacking``). A call that moves the bytes itself (``pack_range``,
    ``unpack_range``) parses its buffers ``direct``: ``raw`` is then None."""

    __slots__ = ("raw", "datatype", "count", "target", "layout")

    def __init__(self, raw: np.ndarray, datatype: Datatype, count: int, target=None, layout=None):
        self.raw = raw
        self.datatype = datatype
        self.count = count
        self.target, self.layout = target, layout

    def store(self, nbytes: int | None = None) -> None:
        """Write the first ``nbytes`` packed bytes (all: None) back where the type map puts them."""
        if self.target is not None:
            self.layout.scatter(self.target, self.raw, self.raw.size if nbytes is None else nbytes)

    @property
    def nbytes(self) -> int:
        """The bytes the buffer sends or receives (packed)."""
        return self.raw.size if self.raw is not None else self.layout.nbytes

    def contiguous(self) -> np.ndarray | None:
        """The bytes as one run of memory, where they are one (else None)."""
        if self.raw is not None:
            return self.raw
        layout = self.layout
        if isinstance(layout, Grid) and not layout.shape:
            return self.target[layout.start:layout.start + layout.run]
        return None

    def runs(self, base: int) -> np.ndarray | None:
        """The runs of memory the bytes lie in, in packed order, as (offset
        from address ``base``, length) rows of int64; None where they are
        not a grid of runs."""
        if self.raw is not None:
            return np.array([[self.raw.__array_interface__["data"][0] - base, self.raw.size]], np.int64)
        if isinstance(self.layout, Grid):
            return self.layout.runs(self.target.__array_interface__["data"][0] - base)
        return None

    def pack_range(self, out: np.ndarray, lo: int) -> None:
        """Write packed bytes ``lo:lo + out.size`` into ``out``."""
        if self.raw is not None:
            out[...] = self.raw[lo:lo + out.size]
        else:
            self.layout.gather_range(self.target, out, lo)

    def unpack_range(self, data: np.ndarray, lo: int) -> None:
        """Receive ``data`` as packed bytes ``lo:lo + data.size``."""
        if self.raw is not None:
            self.raw[lo:lo + data.size] = data
        else:
            self.layout.scatter_range(self.target, data, lo)

    @property
    def typed(self) -> np.ndarray:
        """The elements, as a 1-D array of the datatype's dtype."""
        return self.raw.view(self.datatype.dtype)

    def wire(self) -> np.ndarray:
        """What a simdist collective carries: the typed elements where the
        contract has the dtype, else the raw bytes."""
        typed = self.typed
        return typed if typed.dtype in DTYPE_CODE else self.raw

    def blocks(self, n: int) -> np.ndarray:
        """The typed elements as ``(n, count)`` blocks."""
        typed = self.typed
        return typed.reshape(n, typed.size // n)


def memory_bytes(obj, writable: bool, what: str) -> tuple[np.ndarray, Datatype | None]:
    """The bytes of ``obj`` in memory order, and the datatype its format implies."""
    if obj is None or obj is BOTTOM:
        return np.empty(0, np.uint8), None
    if isinstance(obj, np.ndarray):
        arr = obj if type(obj) is np.ndarray else obj.view(np.ndarray)  # MPI.buffer indexes its own way
        infer = of_array
    else:
        try:
            view = memoryview(obj)
            arr, fmt = np.asarray(view), view.format
        except TypeError:
            found = memory(obj, writable)  # DLPack or the CUDA array interface
            if found is None:
                raise TypeError(f"message: expecting buffer or list/tuple, got {type(obj).__name__} for {what}"
                                ) from None
            arr, fmt = found

        def infer(_arr, fmt=fmt):
            return of_format(fmt)

    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise BufferError(f"{what}: the buffer is not contiguous; pass a contiguous copy (numpy.ascontiguousarray)")
    if writable and not arr.flags.writeable:
        raise BufferError(f"{what}: the buffer is read-only and the call writes into it")
    raw = arr.reshape(-1, order="A").view(np.uint8) if arr.size else np.empty(0, np.uint8)
    return raw, (lambda: infer(arr))


def _items(spec, pair_types, what: str) -> tuple:
    """``(buf, count, displ, datatype)`` of a buffer spec: ``buf``, ``[buf,
    count]``, ``[buf, datatype]``, ``[buf, (count, displ)]``, ``[buf, count,
    datatype]`` or ``[buf, count, displ, datatype]``; absent items are None."""
    o_buf, o_count, o_displ, o_type = spec, None, None, None
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        if n == 2:
            o_buf, o_count = spec
            if isinstance(o_count, (Datatype, str)):
                o_count, o_type = None, o_count
            elif isinstance(o_count, pair_types):
                o_count, o_displ = o_count
        elif n == 3:
            o_buf, o_count, o_type = spec
            if isinstance(o_count, pair_types):
                o_count, o_displ = o_count
        elif n == 4:
            o_buf, o_count, o_displ, o_type = spec
        else:
            raise ValueError(f"message: expecting 2 to 4 items in {what}, got {n}")
    return o_buf, o_count, o_displ, o_type


def _memory_and_type(o_buf, o_type, writable: bool, what: str):
    raw, infer = memory_bytes(o_buf, writable, what)
    if o_type is not None:
        return raw, lookup(o_type)
    if infer is None:
        raise ValueError(f"message: {what} is None (or BOTTOM): an explicit datatype is required, as in [None, 'B']")
    return raw, infer()


def parse(spec, *, writable: bool, blocks: int = 0, what: str = "buf") -> BufSpec:
    """Parse a buffer argument (see the module docstring).

    ``blocks`` >= 2: the buffer holds one block per rank, and an inferred
    count is per block. ``what`` names the argument in error messages.
    """
    if type(spec) is np.ndarray and spec.flags.c_contiguous and (spec.flags.writeable or not writable):
        datatype = of_array(spec)  # the common case, quickly
        extent = datatype.Get_size()
        if blocks < 2 or (spec.size and spec.nbytes // extent % blocks == 0):
            raw = spec.reshape(-1).view(np.uint8) if spec.size else np.empty(0, np.uint8)
            return BufSpec(raw, datatype, spec.nbytes // extent // max(blocks, 1))
    o_buf, o_count, o_displ, o_type = _items(spec, (list, tuple), what)
    raw, datatype = _memory_and_type(o_buf, o_type, writable, what)
    if datatype._is_derived():
        return typed_spec(o_buf, o_count, o_displ, raw, datatype, writable, max(blocks, 1), what)
    # MPI.DATATYPE_NULL: mpi4py's ValueError where it needs an extent, else MPI's ERR_TYPE (below)
    extent = datatype.Get_size() if datatype else 0
    length, offset = raw.size, 0
    if o_displ is not None:
        displ = operator.index(o_displ)
        if displ < 0:
            raise ValueError(f"message: negative diplacement {displ}")
        if displ > 0 and not datatype:
            raise ValueError("message: cannot handle displacement, datatype is null")
        if displ * extent > length and not claimed_only(o_buf):
            raise ValueError(f"message: displacement {displ} out of bounds, number of datatype entries "
                             f"{length // max(extent, 1)}")
        offset = displ * extent
        length = max(length - offset, 0)
    if o_count is not None:
        count = operator.index(o_count)
        if count < 0:
            raise ValueError(f"message: negative count {count}")
        if count > 0 and o_buf is None:
            raise ValueError(f"message: buffer is None but count is {count}")
    elif length > 0:
        if not datatype:
            raise ValueError("message: cannot infer count, datatype is null")
        if extent <= 0:
            raise ValueError(f"message: cannot infer count, datatype {datatype.Get_name()} has extent {extent}")
        if length % extent:
            raise ValueError(f"message: cannot infer count, buffer length {length} is not a multiple of "
                             f"datatype extent {extent} (lb:0, ub:{extent})")
        entries = length // extent
        if blocks >= 2:
            if entries % blocks:
                raise ValueError(f"message: cannot infer count, number of entries {entries} is not a multiple "
                                 f"of required number of blocks {blocks}")
            count = entries // blocks
        else:
            count = entries
    else:
        count = 0
    if not datatype:
        datatype.Get_size()  # MPI's ERR_TYPE, as the call would give
    need = count * max(blocks, 1) * extent
    if need > length and claimed_only(o_buf):
        memory = beyond_claim(o_buf, Grid(offset, (), (), need), writable, what)[0]
        return BufSpec(memory, datatype, count)
    if need > length:
        raise ValueError(
            f"message: {what} has {length} bytes but count={count}"
            + (f" x {blocks} blocks" if blocks >= 2 else "")
            + f" of {datatype.Get_name()} needs {need}; MPI would read or write past its end"
        )
    if count:
        datatype.dtype  # noqa: B018 - raises for datatypes without a numpy equivalent
    return BufSpec(raw[offset:offset + need], datatype, count)


def receive_into(spec):
    """The sink of a receive into a parsed buffer (None: an object), and
    what stores a derived datatype's packed bytes once they are in."""
    if spec is None:
        return None, None
    return spec.raw, (spec.store if spec.target is not None else None)


class VecSpec:
    """A parsed vector buffer (Gatherv, Scatterv, Allgatherv, Alltoallv):
    block ``j`` is ``counts[j]`` elements at ``displs[j]`` (in elements)."""

    __slots__ = ("raw", "datatype", "counts", "displs", "target", "layout")

    def __init__(self, raw, datatype, counts, displs):
        self.raw, self.datatype, self.counts, self.displs = raw, datatype, counts, displs
        self.target = self.layout = None

    def block(self, j: int) -> np.ndarray:
        """The bytes of block ``j`` (packed, for a derived datatype)."""
        size = self.datatype.Get_size()
        if self.layout is not None:
            start = sum(self.counts[:j]) * size
            return self.raw[start:start + self.counts[j] * size]
        return self.raw[self.displs[j] * size:(self.displs[j] + self.counts[j]) * size]

    store = BufSpec.store

    def parts(self) -> list[BufSpec]:
        """Each block as a buffer of its own, over the memory (a ``direct`` parse)."""
        if self.layout is None:
            return [BufSpec(self.block(j), self.datatype, c) for j, c in enumerate(self.counts)]
        return [BufSpec(None, self.datatype, c, self.target, part) for c, part in zip(self.counts, self.layout.parts)]

    def _pack(self, writable: bool, what: str, obj, direct: bool) -> None:
        """For a derived datatype: keep the blocks packed, one after another
        (see BufSpec), unless the call moves them itself (``direct``)."""
        tm = self.datatype._typemap(what)
        if not tm.committed:
            raise MPIException(ERR_TYPE, f"{what}: the datatype is not committed; call its Commit() first")
        layout = Blocks([tm.layout(c).at(d * tm.extent) for c, d in zip(self.counts, self.displs)])
        memory, layout = placed(obj, self.raw, layout, False, writable, what, lambda: (
            f"message: the blocks of {what} (counts {self.counts}, displacements {self.displs}) "
            f"do not fit in its {self.raw.size} bytes"))
        self.layout, self.target = layout, memory
        if not direct:
            self.raw = layout.gather(memory)
            register(self, writable)


def is_integral(value) -> bool:
    """Whether ``value`` is an integer to mpi4py (an int, a numpy integer, a 0-d integer array)."""
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _ints(values, n: int, what: str) -> list[int]:
    values = [operator.index(v) for v in values]
    if len(values) != n:
        raise ValueError(f"message: expecting {n} items in {what}, got {len(values)}")
    return values


def parse_vector(spec, *, writable: bool, blocks: int, what: str = "buf", direct: bool = False) -> VecSpec:
    """Parse a vector buffer argument, as mpi4py's ``message_vector``:
    ``buf``, ``[buf, counts]``, ``[buf, (counts, displs)]``, ``[buf, counts,
    datatype]``, ``[buf, (counts, displs), datatype]`` or ``[buf, counts,
    displs, datatype]``; counts None (split evenly), an int (the same for
    every block) or a sequence; displs None (contiguous), an int (strided)
    or a sequence. ``direct``: the call moves each block's bytes itself
    (``VecSpec.parts``), with no packed copy of a derived datatype's."""
    # A (counts, displs) pair is a tuple here: a list is the counts themselves.
    o_buf, o_counts, o_displs, o_type = _items(spec, tuple, what)
    raw, datatype = _memory_and_type(o_buf, o_type, writable, what)
    if o_counts is None and raw.size and not datatype:
        raise ValueError("message: cannot infer count, datatype is null")
    extent = datatype.Get_extent()[1] if datatype._is_derived() else datatype.Get_size()
    if o_counts is None:
        if extent and raw.size % extent:
            raise ValueError(f"message: cannot infer count, buffer length {raw.size} is not a multiple of "
                             f"datatype extent {extent}")
        total = raw.size // extent if extent else 0
        counts = [total // blocks + (total % blocks > i) for i in range(blocks)]
    elif is_integral(o_counts):
        counts = [operator.index(o_counts)] * blocks
    else:
        counts = _ints(o_counts, blocks, f"the counts of {what}")
    if o_displs is None:
        displs = [sum(counts[:i]) for i in range(blocks)]
    elif is_integral(o_displs):
        displs = [operator.index(o_displs) * i for i in range(blocks)]
    else:
        displs = _ints(o_displs, blocks, f"the displacements of {what}")
    if datatype._is_derived():
        vec = VecSpec(raw, datatype, counts, displs)
        vec._pack(writable, what, o_buf, direct)
        return vec
    end = max([(d + c) * extent for c, d in zip(counts, displs)], default=0)
    if end > raw.size and claimed_only(o_buf) and min(counts + displs, default=0) >= 0:
        raw = beyond_claim(o_buf, Grid(0, (), (), end), writable, what)[0]
    vec = VecSpec(raw, datatype, counts, displs)
    for j in range(blocks):
        if counts[j] < 0 or displs[j] < 0 or (displs[j] + counts[j]) * extent > raw.size:
            raise ValueError(f"message: block {j} of {what} (count {counts[j]}, displacement {displs[j]}) does not "
                             f"fit in its {raw.size} bytes")
    if any(counts):
        datatype.dtype  # noqa: B018 - raises for datatypes without a numpy equivalent
    return vec


def typed_spec(o_buf, o_count, o_displ, raw, datatype, writable: bool, blocks: int, what: str) -> BufSpec:
    """A buffer of a derived datatype: its packed bytes (see BufSpec). With
    ``MPI.BOTTOM`` (or None) the displacements are addresses."""
    tm = datatype._typemap(what)
    if not tm.committed:
        raise MPIException(ERR_TYPE, f"{what}: the datatype is not committed; call its Commit() first")
    lb, extent = tm.lb, tm.extent
    offset = 0
    if o_displ is not None:
        offset = operator.index(o_displ) * extent
        if operator.index(o_displ) < 0:
            raise ValueError(f"message: negative diplacement {o_displ}")
        if offset and extent <= 0:
            raise ValueError(f"message: cannot handle displacement, datatype extent {extent} "
                             f"(lb:{lb}, ub:{lb + extent})")
    if o_count is not None:
        count = operator.index(o_count)
        if count < 0:
            raise ValueError(f"message: negative count {count}")
    elif raw.size - offset > 0:
        length = raw.size - offset
        if extent <= 0 or length % extent:
            raise ValueError(f"message: cannot infer count, buffer length {length} is not a multiple of "
                             f"datatype extent {extent} (lb:{lb}, ub:{lb + extent})")
        count = length // extent // blocks
    else:
        count = 0
    layout = tm.layout(count * blocks).at(offset)
    size = raw.size
    raw, layout = placed(o_buf, raw, layout, o_buf is None or o_buf is BOTTOM, writable, what, lambda: (
        f"message: {what} has {size} bytes but count={count}" + (f" x {blocks} blocks" if blocks >= 2 else "")
        + f" of a datatype spanning bytes {layout.lo} to {layout.hi}; MPI would read or write past its end"))
    if isinstance(layout, Grid) and not layout.shape and layout.run:
        # one run of memory in type-map order (a large count as a vector and a remainder):
        # its packed bytes are the memory itself, as a predefined datatype's are
        return BufSpec(raw[layout.start:layout.start + layout.run], datatype, count)
    spec = BufSpec(layout.gather(raw), datatype, count, raw, layout)
    register(spec, writable)
    return spec


def parse_w(spec, n: int, *, writable: bool, what: str, direct: bool = False) -> list[BufSpec]:
    """The ``n`` blocks of an Alltoallw buffer, as mpi4py reads it: ``[buf,
    datatypes]`` (one element of each, at 0), ``[buf, (counts, displs),
    datatypes]`` or ``[buf, counts, displs, datatypes]``, displacements in
    bytes; with ``MPI.BOTTOM`` the displacements are addresses: block ``j``
    is ``counts[j]`` elements of ``datatypes[j]``. ``direct``: the call
    moves each block's bytes itself (``pack_range``, ``unpack_range``),
    with no packed copy of a derived datatype's block."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3, 4):
        raise ValueError(f"message: expecting 2 to 4 items in {what}")
    if len(spec) == 2:
        (buf, types), counts, displs = spec, None, None
    else:
        buf, counts, displs, types = spec if len(spec) == 4 else (spec[0], *spec[1], spec[2])
    bottom = buf is None or buf is BOTTOM
    if bottom and (counts is None or displs is None):
        raise ValueError(f"message: BOTTOM requires counts and displs ({what})")
    raw = memory_bytes(buf, writable, what)[0]
    if counts is None and displs is None:
        counts, displs = [1] * n, [0] * n
    counts, displs = _ints(counts, n, f"the counts of {what}"), _ints(displs, n, f"the displacements of {what}")
    types = [types] * n if isinstance(types, Datatype) else list(types)
    if len(types) != n:
        raise ValueError(f"message: expecting {n} datatypes in {what}, got {len(types)}")
    return [_w_block(buf, raw, bottom, count, displ, lookup(datatype), writable, direct, f"block {j} of {what}")
            for j, (count, displ, datatype) in enumerate(zip(counts, displs, types))]


def _w_block(buf, raw, bottom: bool, count: int, displ: int, datatype, writable: bool, direct: bool,
             what: str) -> BufSpec:
    if count < 0:
        raise ValueError(f"message: {what} has the negative count {count}")
    if not datatype._is_derived():
        nbytes = count * datatype.Get_size()
        span = Grid(displ, (), (), nbytes)
        if bottom:
            raw, displ = absolute_memory(span, writable, what)[0], 0
        elif (displ < 0 or displ + nbytes > raw.size) and claimed_only(buf):
            raw, displ = beyond_claim(buf, span, writable, what)[0], 0
        if displ < 0 or displ + nbytes > raw.size:
            raise ValueError(f"message: {what} (count {count}, displacement {displ} bytes) does not fit in its "
                             f"{raw.size} bytes")
        return BufSpec(raw[displ:displ + nbytes], datatype, count)
    tm = datatype._typemap(what)
    if not tm.committed:
        raise MPIException(ERR_TYPE, f"{what}: the datatype is not committed; call its Commit() first")
    memory, layout = placed(buf, raw, tm.layout(count).at(displ), bottom, writable, what, lambda: (
        f"message: {what} (count {count}, displacement {displ} bytes) does not fit in its {raw.size} bytes"))
    if direct:
        return BufSpec(None, datatype, count, memory, layout)
    block = BufSpec(layout.gather(memory), datatype, count, memory, layout)
    register(block, writable)
    return block
