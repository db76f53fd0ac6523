"""``MPI.buffer`` (and its old name ``MPI.memory``): mpi4py's view of raw memory.

mpi4py's buffer is a one-dimensional run of bytes (format "B") with the
buffer protocol: made from any buffer-like object (``buffer(obj)``,
``buffer.frombuffer``), from an address (``buffer.fromaddress``) or newly
allocated (``buffer.allocate``, and ``MPI.Alloc_mem``). Indexing gives
ints, slices give buffers on the same memory (no step), assignment takes
an int (every byte) or bytes of the same length; ``release`` lets go of
the memory (address 0, no bytes). Here it is a numpy array of uint8, so
that messages take it as they take arrays; what differs from an array
(equality is identity, truth is being non-empty, the errors) is mpi4py's.
"""

from __future__ import annotations

import ctypes
import operator

import numpy as np

from ._buffers import is_integral, memory_bytes
from ._interfaces import check_cpu_accessible, device_kind


class buffer(np.ndarray):
    """See the module docstring."""

    def __new__(cls, *args):
        if not args:
            return _wrap(np.empty(0, np.uint8), None, False, address=0)
        obj = args[0]
        if obj is None:
            raise TypeError("expecting buffer-like object, got None")
        raw, _ = memory_bytes(obj, False, "buffer")
        return _wrap(raw, obj, not raw.flags.writeable, kind=device_kind(obj))

    def __array_finalize__(self, obj):
        self._obj, self._address, self._released = None, None, False
        self._kind = getattr(obj, "_kind", 0)  # device memory: mpi4py's BufferError on CPU access
        # Made from an address: its length is a claim, and a datatype may reach past it (see _addressed).
        self._claimed = getattr(obj, "_claimed", False)

    # -- making one ----------------------------------------------------------------------------
    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> "buffer":
        """New memory of ``nbytes`` bytes (zeroed if ``clear``)."""
        size = operator.index(nbytes)
        if size < 0:
            raise ValueError("expecting non-negative size")
        raw = np.zeros(size, np.uint8) if clear else np.empty(size, np.uint8)
        return _wrap(raw, raw, False)

    @staticmethod
    def frombuffer(obj, readonly: bool = False) -> "buffer":
        """The memory of a buffer-like object (writable unless ``readonly``)."""
        if obj is None:
            raise TypeError("expecting buffer-like object, got None")
        raw, _ = memory_bytes(obj, not readonly, "buffer")
        return _wrap(raw, obj, readonly or not raw.flags.writeable, kind=device_kind(obj))

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> "buffer":
        """``nbytes`` bytes at ``address`` of this process."""
        address, size = operator.index(address), operator.index(nbytes)
        if size < 0:
            raise ValueError("expecting non-negative buffer length")
        if size > 0 and address == 0:
            raise ValueError("expecting non-NULL address")
        raw = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(address)) if size else np.empty(0, np.uint8)
        buf = _wrap(raw, None, readonly, address=address)
        buf._claimed = True
        return buf

    # -- properties ----------------------------------------------------------------------------
    @property
    def address(self) -> int:
        if self._released:
            return 0
        return self._address if self._address is not None else self.ctypes.data

    @property
    def obj(self):
        return self._obj

    @property
    def nbytes(self) -> int:
        return 0 if self._released else self.size

    @property
    def readonly(self) -> bool:
        return not self._released and not self.flags.writeable

    format = property(lambda self: "B")
    itemsize = property(lambda self: 1)

    # -- methods -------------------------------------------------------------------------------
    def cast(self, format: str, shape=...) -> memoryview:
        view = memoryview(self._bytes())
        return view.cast(format) if shape is ... else view.cast(format, shape)

    def tobytes(self, order=None) -> bytes:
        return self._bytes().tobytes()

    def toreadonly(self) -> "buffer":
        data = self.view(np.ndarray)[:self.nbytes]
        return _wrap(data, self if self._obj is None else self._obj, True, address=self._address, kind=self._kind)

    def release(self) -> None:
        self._obj, self._released = None, True

    def _bytes(self) -> np.ndarray:
        """The bytes, for the CPU to read or write."""
        check_cpu_accessible(self._kind)
        return self.view(np.ndarray)[:self.nbytes]

    # -- a sequence of bytes, as mpi4py's ------------------------------------------------------
    def __len__(self):
        return self.nbytes

    def __bool__(self):
        return self.nbytes > 0

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__
    __repr__ = object.__repr__
    __str__ = object.__str__

    def __getitem__(self, item):
        data = self._bytes()
        if isinstance(item, slice):
            return _wrap(data[_span(item, data.size)], self, self.readonly)
        return int(data[_index(item, data.size)])

    def __setitem__(self, item, value):
        if self.readonly:
            raise TypeError("buffer is read-only")
        data = self._bytes()
        if not isinstance(item, slice):
            data[_index(item, data.size)] = operator.index(value) & 0xFF
            return
        target = data[_span(item, data.size)]
        if is_integral(value):
            target[:] = operator.index(value) & 0xFF
            return
        source, _ = memory_bytes(value, False, "value")
        if source.size != target.size:
            raise ValueError("slice length does not match buffer")
        target[:] = source

    def __delitem__(self, item):
        raise NotImplementedError("Subscript deletion not supported by mpi4py.MPI.buffer")


memory = buffer  # mpi4py's older name


def _wrap(raw: np.ndarray, obj, readonly: bool, *, address: int | None = None, kind: int = 0) -> buffer:
    buf = raw.view(buffer)
    if readonly and buf.flags.writeable:
        buf.flags.writeable = False
    buf._obj, buf._address, buf._kind = obj, address, kind
    return buf


def _index(item, length: int) -> int:
    if not is_integral(item):
        raise TypeError("index must be integer or slice")
    index = operator.index(item)
    index += length if index < 0 else 0
    if not 0 <= index < length:
        raise IndexError("index out of range")
    return index


def _span(item: slice, length: int) -> slice:
    start, stop, step = item.indices(length)
    if step != 1:
        raise IndexError("slice with step not supported")
    return slice(start, max(start, stop))
