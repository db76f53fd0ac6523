"""MPI datatypes of the stand-in: the predefined ones, each a numpy dtype.

A datatype only says how to read the bytes of a buffer: ``MPI.DOUBLE`` is
``float64``, ``MPI.INT`` is ``int32``, ``MPI.LONG`` is ``int64`` (LP64
Linux, as the C types of Open MPI on x86-64), ``MPI.C_BOOL`` is ``bool``,
``MPI.CHAR`` is ``S1``, ``MPI.FLOAT_INT`` is the C struct ``{float; int}``
(for MAXLOC and MINLOC), and so on. ``_typedict`` maps buffer format
characters to datatypes, as mpi4py's does, so a plain numpy array finds
its datatype by its dtype.

Derived datatypes (Create_contiguous, Create_vector, Create_struct, ...)
are built by ``_typecalls`` (the calls) and ``_derived`` (the type maps).
"""

from __future__ import annotations

import sys

import numpy as np

from ._attributes import AttributeCalls, delete_attributes
from ._errors import ERR_ARG, ERR_TYPE, unsupported
from ._errors import Exception as MPIException
from ._handles import Handle, IntegerHandles, check_handle, is_constant
from ._typecalls import _MAPS, DerivedCalls

def _missing(name: str) -> Exception:
    return AttributeError(f"'Datatype' object has no attribute {name!r}")


class _DatatypeClass(type):
    """So that ``MPI.Datatype.Create_struct(...)`` (a class method in mpi4py)
    raises NotImplementedError too, which mpi4py's tests skip on."""

    def __getattr__(cls, name):
        raise _missing(name)


_ATTRIBUTES: dict = {}  # a datatype's handle (``_id``) -> its user attributes


class Datatype(Handle, DerivedCalls, IntegerHandles, AttributeCalls, metaclass=_DatatypeClass):
    """An MPI datatype: ``name`` (``MPI_INT``), ``dtype`` (numpy; None for a
    type without one, which only fails when used), ``size`` in bytes."""

    _constant = False  # True on the predefined objects MPI.DOUBLE, ...: Free refuses them

    def _init(self, datatype: "Datatype | None" = None, *, _name: str = "MPI_DATATYPE_NULL", _dtype=None,
             _key: str = "DATATYPE_NULL") -> None:
        # Datatype(other) is another handle on the same datatype, as in mpi4py; ``_id`` is the
        # MPI handle: the key of a predefined datatype, a new object for each Dup.
        self._id = _key
        if datatype is not None:
            check_handle(datatype, Datatype, type(self))
            _name, _dtype, _key, self._id = datatype._name, datatype._dtype, datatype._key, datatype._id
        self._name = _name
        self._dtype = None if _dtype is None else np.dtype(_dtype)
        self._key = _key

    # -- identity ---------------------------------------------------------------
    def __eq__(self, other):
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._id is other._id or self._id == other._id

    def __bool__(self):
        return self._id != "DATATYPE_NULL"

    def __repr__(self):
        return f"<mpi4py.MPI.Datatype {self._name} (simdist)>"

    def _valid(self, call: str) -> "Datatype":
        if not self:
            raise MPIException(ERR_TYPE, f"Datatype.{call} of MPI.DATATYPE_NULL")
        return self

    # -- queries ----------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of one element; raises for types that have none."""
        if self._dtype is None and not self._predefined():
            return self._derived_dtype()
        if self._dtype is None:
            if not self:
                raise TypeError("MPI.DATATYPE_NULL cannot describe a buffer; pass a datatype such as MPI.DOUBLE")
            if self._key in _UNAVAILABLE:
                raise MPIException(ERR_TYPE, f"{self._name} is not available (nor under Open MPI 5)")
            raise unsupported(f"the datatype {self._name}", "it has no numpy equivalent here; use another datatype")
        return self._dtype

    def _predefined(self) -> bool:
        """A predefined datatype (or DATATYPE_NULL), not a derived one."""
        return self._id == self._key

    def Get_name(self) -> str:
        return self._name

    def Set_name(self, name: str) -> None:
        self._valid("Set_name")._name = str(name)

    def Free(self) -> None:
        """Free a Dup; the handle becomes MPI.DATATYPE_NULL. A predefined
        datatype cannot be freed (MPI_ERR_TYPE, as under Open MPI)."""
        if self._id not in _MAPS:  # null, predefined or freed: MPI's error
            if self._valid("Free")._predefined():
                raise MPIException(ERR_TYPE, f"Datatype.Free of {self._name}, a predefined datatype")
            self._typemap("Free")
        if _ATTRIBUTES.get(self._id):
            delete_attributes(self, "Datatype.Free")
        _ATTRIBUTES.pop(self._id, None)
        self._free_map()
        self._init()

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's ``free``); a handle on a
        predefined datatype becomes null, the predefined object stays."""
        if not self._predefined():
            self.Free()
        elif not is_constant(self):
            self._init()

    # -- user attributes (``_attributes``) -----------------------------------------------
    _attr_kind = "Datatype"

    def _attributes(self) -> dict:
        return _ATTRIBUTES.setdefault(self._valid("attributes")._id, {})

    def _has_attributes(self) -> bool:
        """Whether the handle holds an attribute (cheaper than ``_attributes()``, which makes the table)."""
        return bool(_ATTRIBUTES.get(self._id))

    def _attribute_handle(self) -> "Datatype":
        return Datatype(self)

    def _make_null(self) -> None:
        self._init()

    def Get_attr(self, keyval: int):
        return self._user_attr(keyval)

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> "Datatype":
        """The Fortran datatype of ``typeclass`` (MPI.TYPECLASS_INTEGER, ...) and ``size`` bytes, as Open MPI
        answers."""
        try:
            return TYPES[_MATCH_SIZE[typeclass][size]]
        except KeyError:
            raise MPIException(ERR_ARG, f"Datatype.Match_size({typeclass}, {size}): no such datatype") from None

    def tocode(self) -> str:
        """The type code of the datatype, as mpi4py's (``"d"`` for MPI.DOUBLE)."""
        try:
            return _TOCODE[self._key]
        except KeyError:
            raise ValueError("cannot map to character code or type string") from None

    name = property(Get_name, Set_name)
    @property
    def typechar(self) -> str:
        """mpi4py's one-character code ("V" for a type without one)."""
        if not self:
            return ""
        try:
            code = self.tocode()
        except ValueError:
            return "V"
        return code if len(code) == 1 else np.dtype(code).char

    @property
    def typestr(self) -> str:
        """mpi4py's numpy type string (``V<extent>`` for a type without one)."""
        if not self:
            return ""
        try:
            self.tocode()
        except ValueError:
            return f"V{self.Get_extent()[1]}"
        try:  # the code's own numpy type where it has the size (LOGICAL1: "b1"), else the element's
            coded = np.dtype(self.tocode())
        except TypeError:
            coded = None
        return coded.str if coded is not None and coded.itemsize == self.Get_size() else self.dtype.str

    @classmethod
    def Get_value_index(cls, value: "Datatype", index: "Datatype") -> "Datatype":
        """The predefined pair type ``{value; index}`` of MAXLOC/MINLOC
        (MPI.DATATYPE_NULL where MPI has none, as Open MPI answers)."""
        for datatype in (value, index):
            if not isinstance(datatype, Datatype) or not datatype:
                raise MPIException(ERR_TYPE, f"Datatype.Get_value_index({value!r}, {index!r}): a null datatype")
        if index == TYPES["INT"]:
            key = f"{value._key}_INT" if value._predefined() else ""
            if key in TYPES and TYPES[key]._dtype is not None and TYPES[key]._dtype.names:
                return TYPES[key]
        return TYPES["DATATYPE_NULL"]

    @classmethod
    def fromcode(cls, code: str) -> "Datatype":
        try:
            return lookup(code)
        except KeyError as exc:
            raise ValueError(str(exc)) from None

    def __getattr__(self, name):
        raise _missing(name)


def _pair(value) -> np.dtype:
    """The C struct ``{value; int}`` of MPI's MAXLOC/MINLOC pair types."""
    return np.dtype([("value", value), ("index", np.int32)], align=True)


_PREDEFINED = {
    # name: numpy dtype (None: no numpy equivalent)
    "DATATYPE_NULL": None, "PACKED": np.uint8, "BYTE": np.uint8,
    "AINT": np.int64, "OFFSET": np.int64, "COUNT": np.int64,
    "CHAR": "S1", "WCHAR": "U1", "SIGNED_CHAR": np.int8, "SHORT": np.int16, "INT": np.int32,
    "LONG": np.int64, "LONG_LONG": np.longlong, "UNSIGNED_CHAR": np.uint8, "UNSIGNED_SHORT": np.uint16,
    "UNSIGNED": np.uint32, "UNSIGNED_LONG": np.uint64, "UNSIGNED_LONG_LONG": np.ulonglong,
    "FLOAT": np.float32, "DOUBLE": np.float64, "LONG_DOUBLE": np.longdouble, "C_BOOL": np.bool_,
    "INT8_T": np.int8, "INT16_T": np.int16, "INT32_T": np.int32, "INT64_T": np.int64,
    "UINT8_T": np.uint8, "UINT16_T": np.uint16, "UINT32_T": np.uint32, "UINT64_T": np.uint64,
    "FLOAT16_T": np.float16, "FLOAT32_T": np.float32, "FLOAT64_T": np.float64, "BFLOAT16_T": None,
    "C_FLOAT_COMPLEX": np.complex64, "C_DOUBLE_COMPLEX": np.complex128,
    "C_LONG_DOUBLE_COMPLEX": np.clongdouble,
    "CXX_BOOL": np.bool_, "CXX_FLOAT_COMPLEX": np.complex64, "CXX_DOUBLE_COMPLEX": np.complex128,
    "CXX_LONG_DOUBLE_COMPLEX": np.clongdouble,
    "SHORT_INT": _pair(np.int16), "INT_INT": _pair(np.int32), "LONG_INT": _pair(np.int64),
    "FLOAT_INT": _pair(np.float32), "DOUBLE_INT": _pair(np.float64), "LONG_DOUBLE_INT": _pair(np.longdouble),
    "CHARACTER": "S1", "LOGICAL": np.int32, "INTEGER": np.int32, "REAL": np.float32,
    "DOUBLE_PRECISION": np.float64, "COMPLEX": np.complex64, "DOUBLE_COMPLEX": np.complex128,
    "LOGICAL1": np.int8, "LOGICAL2": np.int16, "LOGICAL4": np.int32, "LOGICAL8": np.int64, "LOGICAL16": None,
    "INTEGER1": np.int8, "INTEGER2": np.int16, "INTEGER4": np.int32, "INTEGER8": np.int64, "INTEGER16": None,
    "REAL4": np.float32, "REAL8": np.float64, "REAL16": "V16",  # quad precision: bytes only
    "COMPLEX4": None, "COMPLEX8": np.complex64, "COMPLEX16": np.complex128, "COMPLEX32": None,
}
#: Datatype.tocode(): the type code mpi4py gives each predefined datatype under Open MPI.
_TOCODE = {
    "AINT": "p", "BYTE": "B", "CHAR": "c", "CHARACTER": "c", "COMPLEX": "F", "COMPLEX16": "c16",
    "COMPLEX32": "c32", "COMPLEX8": "c8", "COUNT": "p", "CXX_BOOL": "?", "CXX_DOUBLE_COMPLEX": "D",
    "CXX_FLOAT_COMPLEX": "F", "CXX_LONG_DOUBLE_COMPLEX": "G", "C_BOOL": "b1", "C_DOUBLE_COMPLEX": "D",
    "C_FLOAT_COMPLEX": "F", "C_LONG_DOUBLE_COMPLEX": "G", "DOUBLE": "d", "DOUBLE_COMPLEX": "D",
    "DOUBLE_PRECISION": "d", "FLOAT": "f", "FLOAT16_T": "e", "FLOAT32_T": "f", "FLOAT64_T": "d", "INT": "i",
    "INT16_T": "i2", "INT32_T": "i4", "INT64_T": "i8", "INT8_T": "i1", "INTEGER": "i", "INTEGER1": "i1",
    "INTEGER2": "i2", "INTEGER4": "i4", "INTEGER8": "i8", "LOGICAL": "i", "LOGICAL1": "b1", "LOGICAL2": "i2",
    "LOGICAL4": "i4", "LOGICAL8": "i8", "LONG": "l", "LONG_DOUBLE": "g", "LONG_LONG": "q", "OFFSET": "p",
    "PACKED": "B", "REAL": "f", "REAL16": "f16", "REAL4": "f4", "REAL8": "f8", "SHORT": "h", "SIGNED_CHAR": "b",
    "UINT16_T": "u2", "UINT32_T": "u4", "UINT64_T": "u8", "UINT8_T": "u1", "UNSIGNED": "I", "UNSIGNED_CHAR": "B",
    "UNSIGNED_LONG": "L", "UNSIGNED_LONG_LONG": "Q", "UNSIGNED_SHORT": "H", "WCHAR": "U",
}
#: Optional datatypes Open MPI 5 does not provide: using one raises MPI_ERR_TYPE there, and here.
_UNAVAILABLE = {"COMPLEX4", "COMPLEX32", "INTEGER16", "LOGICAL16", "BFLOAT16_T"}
_MPI_NAMES = {"INT_INT": "MPI_2INT", "FLOAT16_T": "MPI_SHORT_FLOAT", "BFLOAT16_T": "MPIX_C_BF16",
              "C_FLOAT_COMPLEX": "MPI_C_COMPLEX", "LONG_LONG": "MPI_LONG_LONG_INT"}
_ALIASES = {
    "TWOINT": "INT_INT", "UNSIGNED_INT": "UNSIGNED", "SIGNED_SHORT": "SHORT", "SIGNED_INT": "INT",
    "SIGNED_LONG": "LONG", "SIGNED_LONG_LONG": "LONG_LONG", "BOOL": "C_BOOL", "SINT8_T": "INT8_T",
    "SINT16_T": "INT16_T", "SINT32_T": "INT32_T", "SINT64_T": "INT64_T", "F_BOOL": "LOGICAL", "F_INT": "INTEGER",
    "F_FLOAT": "REAL", "F_DOUBLE": "DOUBLE_PRECISION", "F_COMPLEX": "COMPLEX", "F_FLOAT_COMPLEX": "COMPLEX",
    "F_DOUBLE_COMPLEX": "DOUBLE_COMPLEX", "C_COMPLEX": "C_FLOAT_COMPLEX",
    "REAL2": "DATATYPE_NULL",  # Open MPI 5 has no MPI_REAL2: mpi4py's MPI.REAL2 is null there
}

#: Every predefined datatype by its mpi4py name (``"DOUBLE"`` -> MPI.DOUBLE), aliases included.
TYPES: dict[str, Datatype] = {
    key: Datatype(_name=_MPI_NAMES.get(key, f"MPI_{key}"), _dtype=dtype, _key=key)
    for key, dtype in _PREDEFINED.items()
}
TYPES.update({alias: TYPES[key] for alias, key in _ALIASES.items()})
for _datatype in TYPES.values():
    _datatype._constant = True
#: Datatype.Match_size: typeclass -> size -> the datatype Open MPI gives.
_MATCH_SIZE = {
    1: {1: "INTEGER1", 2: "INTEGER2", 4: "INTEGER", 8: "INTEGER8"},  # MPI.TYPECLASS_INTEGER
    2: {4: "REAL", 8: "REAL8", 16: "REAL16"},  # MPI.TYPECLASS_REAL
    3: {8: "COMPLEX", 16: "COMPLEX16", 32: "COMPLEX32"},  # MPI.TYPECLASS_COMPLEX
    4: {1: "LOGICAL1", 2: "LOGICAL2", 4: "LOGICAL4", 8: "LOGICAL8"},  # MPI.TYPECLASS_LOGICAL
}

#: Buffer format characters -> datatypes: mpi4py's ``MPI._typedict`` (and the
#: C and Fortran ones) under Open MPI, key for key.
_TYPECODES = {
    "?": "BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT", "l": "LONG", "q": "LONG_LONG", "B": "UNSIGNED_CHAR",
    "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG", "Q": "UNSIGNED_LONG_LONG", "e": "FLOAT16_T",
    "f": "FLOAT", "d": "DOUBLE", "g": "LONG_DOUBLE", "Zf": "C_COMPLEX", "Zd": "C_DOUBLE_COMPLEX", "F": "C_COMPLEX",
    "D": "C_DOUBLE_COMPLEX", "Zg": "C_LONG_DOUBLE_COMPLEX", "G": "C_LONG_DOUBLE_COMPLEX", "i1": "INT8_T",
    "i2": "INT16_T", "i4": "INT32_T", "i8": "INT64_T", "f4": "FLOAT", "f8": "DOUBLE", "f16": "LONG_DOUBLE",
    "c8": "C_COMPLEX", "c16": "C_DOUBLE_COMPLEX", "c32": "C_LONG_DOUBLE_COMPLEX", "b1": "BOOL", "u1": "UINT8_T",
    "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T", "f2": "FLOAT16_T", "n": "COUNT", "N": "UNSIGNED_LONG",
    "p": "AINT", "P": "UNSIGNED_LONG", "c": "CHAR", "a": "CHAR", "S": "CHAR", "S1": "CHAR", "s": "CHAR",
    "1s": "CHAR", "U": "WCHAR", "U1": "WCHAR", "u": "UINT16_T", "1u": "UINT16_T", "w": "WCHAR", "1w": "WCHAR",
    "M": "INT64_T", "M8": "INT64_T", "m": "INT64_T", "m8": "INT64_T",
}
_TYPECODES_C = {
    "?": "BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT", "l": "LONG", "q": "LONG_LONG", "B": "UNSIGNED_CHAR",
    "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG", "Q": "UNSIGNED_LONG_LONG", "f": "FLOAT",
    "d": "DOUBLE", "g": "LONG_DOUBLE", "F": "C_COMPLEX", "D": "C_DOUBLE_COMPLEX", "G": "C_LONG_DOUBLE_COMPLEX",
    "b1": "BOOL", "i1": "INT8_T", "i2": "INT16_T", "i4": "INT32_T", "i8": "INT64_T", "u1": "UINT8_T",
    "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T", "f2": "FLOAT16_T", "f4": "FLOAT", "c8": "C_COMPLEX",
    "f8": "DOUBLE", "c16": "C_DOUBLE_COMPLEX", "f16": "LONG_DOUBLE", "c32": "C_LONG_DOUBLE_COMPLEX",
}
_TYPECODES_F = {
    "l": "F_BOOL", "i": "F_INT", "r": "F_FLOAT", "s": "F_FLOAT", "d": "DOUBLE_PRECISION", "c": "COMPLEX",
    "z": "DOUBLE_COMPLEX", "l1": "LOGICAL1", "l2": "LOGICAL2", "l4": "LOGICAL4", "l8": "LOGICAL8",
    "i1": "INTEGER1", "i2": "INTEGER2", "i4": "INTEGER4", "i8": "INTEGER8", "r4": "REAL4", "r8": "REAL8",
    "r16": "REAL16", "c8": "COMPLEX8", "c16": "COMPLEX16", "c32": "COMPLEX32",
}
_typedict: dict[str, Datatype] = {code: TYPES[name] for code, name in _TYPECODES.items()}
_typedict_c: dict[str, Datatype] = {code: TYPES[name] for code, name in _TYPECODES_C.items()}
_typedict_f: dict[str, Datatype] = {code: TYPES[name] for code, name in _TYPECODES_F.items()}


def lookup(code) -> Datatype:
    """A datatype given as a Datatype or as a type code (``"d"``, ``"B"``)."""
    if isinstance(code, Datatype):
        return code
    try:
        return _typedict[code]
    except (KeyError, TypeError):
        raise KeyError(f"cannot map {code!r} to MPI datatype") from None


def of_array(arr: np.ndarray) -> Datatype:
    """The datatype mpi4py infers for a numpy array: by its buffer format."""
    dtype = arr.dtype
    if not dtype.isnative:
        raise BufferError(f"format string {memoryview(arr).format!r} with non-native byte order")
    if dtype == np.uint8:
        return TYPES["BYTE"]  # format "B" is MPI_BYTE, as in mpi4py
    if dtype.kind in "SU" and dtype.itemsize not in (1, 4):
        raise KeyError(f"cannot map {dtype.str!r} to MPI datatype")
    return lookup(dtype.char)


def of_format(fmt: str) -> Datatype:
    """The datatype of a buffer format (memoryview.format) as mpi4py infers it."""
    if fmt in ("B", "@B"):
        return TYPES["BYTE"]
    native = "<" if sys.byteorder == "little" else ">"
    if fmt[:1] in "<>" and fmt[0] != native:
        raise BufferError(f"format string {fmt!r} with non-native byte order")
    if fmt[:1] in "@=<>":
        fmt = fmt[1:]
    return lookup(fmt)
