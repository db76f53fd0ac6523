"""``MPI._typecode`` and ``MPI._typealign``: a predefined datatype's
character code (numpy's, or a type string such as ``"i4"``) and its
alignment, as mpi4py computes them from the C types on x86-64 Linux (the
values below are mpi4py 4.1's over Open MPI 5). ``mpi4py.util.dtlib``
uses them. A derived datatype, or one with no numpy form, has neither
(None), as in mpi4py.
"""

from __future__ import annotations

from ._datatypes import TYPES

#: Name (without ``MPI_``) -> (code, alignment); a code of None has only an alignment.
_TABLE = {
    "AINT": ('p', 8),
    "BOOL": ('b1', 1),
    "BYTE": ('B', 1),
    "CHAR": ('c', 1),
    "CHARACTER": ('c', 1),
    "COMPLEX": ('F', 4),
    "COMPLEX16": ('c16', 8),
    "COMPLEX32": ('c32', 16),
    "COMPLEX8": ('c8', 4),
    "COUNT": ('p', 8),
    "CXX_BOOL": ('?', 1),
    "CXX_DOUBLE_COMPLEX": ('D', 8),
    "CXX_FLOAT_COMPLEX": ('F', 4),
    "CXX_LONG_DOUBLE_COMPLEX": ('G', 16),
    "C_BOOL": ('b1', 1),
    "C_COMPLEX": ('F', 4),
    "C_DOUBLE_COMPLEX": ('D', 8),
    "C_FLOAT_COMPLEX": ('F', 4),
    "C_LONG_DOUBLE_COMPLEX": ('G', 16),
    "DOUBLE": ('d', 8),
    "DOUBLE_COMPLEX": ('D', 8),
    "DOUBLE_INT": (None, 8),
    "DOUBLE_PRECISION": ('d', 8),
    "FLOAT": ('f', 4),
    "FLOAT16_T": ('e', 2),
    "FLOAT32_T": ('f', 4),
    "FLOAT64_T": ('d', 8),
    "FLOAT_INT": (None, 4),
    "F_BOOL": ('i', 4),
    "F_COMPLEX": ('F', 4),
    "F_DOUBLE": ('d', 8),
    "F_DOUBLE_COMPLEX": ('D', 8),
    "F_FLOAT": ('f', 4),
    "F_FLOAT_COMPLEX": ('F', 4),
    "F_INT": ('i', 4),
    "INT": ('i', 4),
    "INT16_T": ('i2', 2),
    "INT32_T": ('i4', 4),
    "INT64_T": ('i8', 8),
    "INT8_T": ('i1', 1),
    "INTEGER": ('i', 4),
    "INTEGER1": ('i1', 1),
    "INTEGER2": ('i2', 2),
    "INTEGER4": ('i4', 4),
    "INTEGER8": ('i8', 8),
    "INT_INT": (None, 4),
    "LOGICAL": ('i', 4),
    "LOGICAL1": ('b1', 1),
    "LOGICAL2": ('i2', 2),
    "LOGICAL4": ('i4', 4),
    "LOGICAL8": ('i8', 8),
    "LONG": ('l', 8),
    "LONG_DOUBLE": ('g', 16),
    "LONG_DOUBLE_INT": (None, 16),
    "LONG_INT": (None, 8),
    "LONG_LONG": ('q', 8),
    "OFFSET": ('p', 8),
    "PACKED": ('B', 1),
    "REAL": ('f', 4),
    "REAL16": ('f16', 16),
    "REAL4": ('f4', 4),
    "REAL8": ('f8', 8),
    "SHORT": ('h', 2),
    "SHORT_INT": (None, 4),
    "SIGNED_CHAR": ('b', 1),
    "SIGNED_INT": ('i', 4),
    "SIGNED_LONG": ('l', 8),
    "SIGNED_LONG_LONG": ('q', 8),
    "SIGNED_SHORT": ('h', 2),
    "SINT16_T": ('i2', 2),
    "SINT32_T": ('i4', 4),
    "SINT64_T": ('i8', 8),
    "SINT8_T": ('i1', 1),
    "TWOINT": (None, 4),
    "UINT16_T": ('u2', 2),
    "UINT32_T": ('u4', 4),
    "UINT64_T": ('u8', 8),
    "UINT8_T": ('u1', 1),
    "UNSIGNED": ('I', 4),
    "UNSIGNED_CHAR": ('B', 1),
    "UNSIGNED_INT": ('I', 4),
    "UNSIGNED_LONG": ('L', 8),
    "UNSIGNED_LONG_LONG": ('Q', 8),
    "UNSIGNED_SHORT": ('H', 2),
    "WCHAR": ('U', 4),
}


#: The same by handle (``_id``: a predefined handle's is its key): aliases (MPI.TWOINT, MPI.INT_INT) are one handle.
_BY_HANDLE = {TYPES[name]._id: entry for name, entry in _TABLE.items() if name in TYPES}


def _entry(datatype):
    entry = _BY_HANDLE.get(getattr(datatype, "_id", None))  # only predefined handles have these ids
    if entry is not None:
        return entry
    if not getattr(datatype, "is_predefined", False):
        return None, None
    # null, or a Fortran 90 parameterized type: a handle of its own on a predefined one's key
    return _TABLE.get(getattr(datatype, "_key", None), (None, None))


def _typecode(datatype) -> str | None:
    """Map MPI datatype to character code or type string."""
    return _entry(datatype)[0]


def _typealign(datatype) -> int | None:
    """Return MPI datatype alignment."""
    return _entry(datatype)[1]
