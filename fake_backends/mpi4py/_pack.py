"""Packing of the stand-in: ``Datatype.Pack``, ``Unpack``, ``Pack_size``
and their portable forms ``Pack_external``, ``Unpack_external``,
``Pack_external_size``, for predefined and derived datatypes (a derived
datatype packs its basic elements in type-map order; see ``_derived``).

As in mpi4py, the input of Pack and the output of Unpack are plain buffers
(a numpy array, bytes, bytearray, ...) holding as many whole elements of
the datatype as fit; the packed side is a byte buffer with a running
``position`` (bytes), which each call advances and returns. ``Pack``
writes the elements' bytes as they are in memory, as an MPI library does
between ranks of one machine (``Pack_size(n)`` is ``n`` times the size);
``Pack_external`` writes ``"external32"``, MPI's portable form: each
element big-endian, with the element sizes of Open MPI (8-byte LONG,
4-byte WCHAR). Packing past the end of the output, or unpacking past the
end of the input, raises MPI.Exception(MPI.ERR_TRUNCATE) and changes
nothing.

The methods are Datatype's (``MPI.py`` adds them to the class: they read
buffers, which need datatypes, so they cannot be defined with it).
"""

from __future__ import annotations

import numpy as np

from ._buffers import parse
from ._errors import ERR_ARG, ERR_COMM, ERR_TRUNCATE, ERR_TYPE, Exception as MPIException

EXTERNAL32 = "external32"


def _native(datatype, call: str) -> np.dtype:
    dtype = datatype.dtype
    if dtype is None:
        if datatype.Get_size() == 1:  # MPI.PACKED
            return np.dtype(np.uint8)
        raise MPIException(ERR_TYPE, f"Datatype.{call}: {datatype.Get_name()} has no elements to pack")
    return np.dtype(dtype)


def _external(dtype: np.dtype) -> np.dtype:
    """The external32 form of ``dtype``: big-endian, fields without padding."""
    if dtype.fields is None:
        return dtype.newbyteorder(">") if dtype.byteorder != "|" else dtype
    return np.dtype([(name, _external(dtype.fields[name][0])) for name in dtype.names])


def _check_datarep(datarep, call: str) -> None:
    if datarep != EXTERNAL32:
        raise MPIException(ERR_ARG, f"Datatype.{call}: datarep={datarep!r}; the only one is {EXTERNAL32!r}")


def _check_comm(comm, call: str) -> None:
    check = getattr(comm, "_st", None)
    if check is None:
        raise MPIException(ERR_COMM, f"Datatype.{call}: comm={comm!r} is not a communicator")
    check()


def _position(position, limit: int, nbytes: int, call: str) -> int:
    position = int(position)
    if position < 0 or position + nbytes > limit:
        raise MPIException(ERR_TRUNCATE, f"Datatype.{call}: {nbytes} bytes at position {position} of a buffer of "
                           f"{limit} bytes")
    return position


def _elements(datatype, buf, writable: bool, what: str):
    """The packed bytes of the whole elements of a derived ``datatype`` that
    ``buf`` holds (its length over the extent, as mpi4py counts them)."""
    length = parse(buf, writable=writable, what=what).raw.size
    extent = datatype.Get_extent()[1]
    return parse([buf, length // extent if extent > 0 else 0, datatype], writable=writable, what=what)


def _pack(datatype, dtype: np.dtype, wire: np.dtype, inbuf, outbuf, position, call: str) -> int:
    if datatype._is_derived():
        raw = _elements(datatype, inbuf, False, "inbuf").raw
    else:
        raw = parse(inbuf, writable=False, what="inbuf").raw
    out = parse(outbuf, writable=True, what="outbuf").raw
    count = raw.size // dtype.itemsize
    items = raw[:count * dtype.itemsize].view(dtype)
    packed = items.astype(wire).view(np.uint8) if wire != dtype else items.view(np.uint8)
    position = _position(position, out.size, packed.size, call)
    out[position:position + packed.size] = packed
    return position + packed.size


def _unpack(datatype, dtype: np.dtype, wire: np.dtype, inbuf, position, outbuf, call: str) -> int:
    raw = parse(inbuf, writable=False, what="inbuf").raw
    spec = _elements(datatype, outbuf, True, "outbuf") if datatype._is_derived() else None
    out = parse(outbuf, writable=True, what="outbuf").raw if spec is None else spec.raw
    count = out.size // dtype.itemsize
    nbytes = count * wire.itemsize
    position = _position(position, raw.size, nbytes, call)
    items = raw[position:position + nbytes].copy().view(wire)
    out[:count * dtype.itemsize] = items.astype(dtype).view(np.uint8)
    if spec is not None:
        spec.store()
    return position + nbytes


def Pack(self, inbuf, outbuf, position: int, comm) -> int:
    """Pack the elements of ``inbuf`` into ``outbuf`` at ``position``; the new position."""
    _check_comm(comm, "Pack")
    dtype = _native(self, "Pack")
    return _pack(self, dtype, dtype, inbuf, outbuf, position, "Pack")


def Unpack(self, inbuf, position: int, outbuf, comm) -> int:
    """Unpack from ``inbuf`` at ``position`` as many elements as ``outbuf`` holds; the new position."""
    _check_comm(comm, "Unpack")
    dtype = _native(self, "Unpack")
    return _unpack(self, dtype, dtype, inbuf, position, outbuf, "Unpack")


def Pack_size(self, count: int, comm) -> int:
    _check_comm(comm, "Pack_size")
    return int(count) * (self.Get_size() if self._is_derived() else _native(self, "Pack_size").itemsize)


def Pack_external(self, datarep: str, inbuf, outbuf, position: int) -> int:
    _check_datarep(datarep, "Pack_external")
    dtype = _native(self, "Pack_external")
    return _pack(self, dtype, _external(dtype), inbuf, outbuf, position, "Pack_external")


def Unpack_external(self, datarep: str, inbuf, position: int, outbuf) -> int:
    _check_datarep(datarep, "Unpack_external")
    dtype = _native(self, "Unpack_external")
    return _unpack(self, dtype, _external(dtype), inbuf, position, outbuf, "Unpack_external")


def Pack_external_size(self, datarep: str, count: int) -> int:
    _check_datarep(datarep, "Pack_external_size")
    if self._is_derived():  # external32 sizes are the native ones here
        return int(count) * self.Get_size()
    return int(count) * _external(_native(self, "Pack_external_size")).itemsize


#: Datatype's packing methods, by name.
METHODS = {f.__name__: f for f in (Pack, Unpack, Pack_size, Pack_external, Unpack_external, Pack_external_size)}
