"""The buffer protocol for the stand-in's own classes (``MPI.Win``,
``MPI.BOTTOM``, ``MPI.IN_PLACE``, ``MPI.BUFFER_AUTOMATIC``).

mpi4py's ``Win`` and constants are C types that export memory:
``memoryview(win)`` is the window memory of this rank, writable, format
"B", whose ``obj`` is the window; ``memoryview(MPI.BOTTOM)`` is 0 bytes
with no ``obj``. Before Python 3.12 a class written in Python cannot
export memory (there is no ``__buffer__``; and from 3.12 its views always
have the instance as ``obj``), so ``BufferExporter`` is a C
type made at import with the C API's own ``PyType_FromSpecWithBases``
(through ctypes), whose ``bf_getbuffer``/``bf_releasebuffer`` slots call
back into Python; classes written in Python subclass it and say what to
export in ``_buffer_memory()``.

Why this is sound: the C calls are public, stable-ABI functions
(``PyType_FromSpecWithBases``, ``PyBuffer_FillInfo``) and ``Py_buffer``'s
layout is part of the limited API; the slot callbacks live as long as the
module (never collected); the exported memory is kept alive (a reference in
``_EXPORTS``, keyed by the view's ``internal`` field, which belongs to the
exporter) until the consumer releases the view, so a view never outlives
its memory, also when the window is freed meanwhile.

The one limit: a ctypes callback cannot raise. A refused export
(``memoryview`` of a null or freed window) returns -1 without an error set,
which Python reports as ``SystemError``: the call fails, it never gives a
wrong view.
"""

from __future__ import annotations

import ctypes
import itertools

# getbufferproc and releasebufferproc: int (*)(PyObject *, Py_buffer *, int), void (*)(PyObject *, Py_buffer *)
_GETBUFFER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int)
_RELEASEBUFFER = ctypes.CFUNCTYPE(None, ctypes.py_object, ctypes.c_void_p)
_BF_GETBUFFER, _BF_RELEASEBUFFER = 1, 2  # typeslots.h
_TPFLAGS_BASETYPE = 1 << 10


class _PyBuffer(ctypes.Structure):  # Py_buffer (pybuffer.h)
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


class _Slot(ctypes.Structure):  # PyType_Slot
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _Spec(ctypes.Structure):  # PyType_Spec
    _fields_ = [("name", ctypes.c_char_p), ("basicsize", ctypes.c_int), ("itemsize", ctypes.c_int),
                ("flags", ctypes.c_uint), ("slots", ctypes.POINTER(_Slot))]


_EXPORTS: dict[int, object] = {}  # view key -> what keeps the exported memory alive
_KEYS = itertools.count(1)


def _getbuffer(exporter, view: int, flags: int) -> int:
    try:
        address, nbytes, keep = exporter._buffer_memory()
        owner = id(exporter) if exporter._buffer_owned else None
        if _api().PyBuffer_FillInfo(view, owner, address or None, nbytes, 0, flags) < 0:
            return -1
    except BaseException:  # noqa: BLE001 - a callback must not raise (see the module docstring)
        return -1
    if owner is not None:  # else the view has no obj and is never released: nothing is kept
        key = next(_KEYS)
        _EXPORTS[key] = keep
        _PyBuffer.from_address(view).internal = key
    return 0


def _releasebuffer(exporter, view: int) -> None:
    _EXPORTS.pop(_PyBuffer.from_address(view).internal or 0, None)


_CALLBACKS = (_GETBUFFER(_getbuffer), _RELEASEBUFFER(_releasebuffer))


def _api():
    api = ctypes.pythonapi
    if api.PyBuffer_FillInfo.argtypes is None:
        api.PyBuffer_FillInfo.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t,
                                          ctypes.c_int, ctypes.c_int]
        api.PyBuffer_FillInfo.restype = ctypes.c_int
    return api


def _exporter_type() -> type:
    api = _api()
    slots = (_Slot * 3)((_BF_GETBUFFER, ctypes.cast(_CALLBACKS[0], ctypes.c_void_p)),
                        (_BF_RELEASEBUFFER, ctypes.cast(_CALLBACKS[1], ctypes.c_void_p)), (0, None))
    spec = _Spec(b"mpi4py.MPI._BufferExporter", object.__basicsize__, 0, _TPFLAGS_BASETYPE, slots)
    make = api.PyType_FromSpecWithBases
    make.argtypes, make.restype = [ctypes.POINTER(_Spec), ctypes.py_object], ctypes.py_object
    cls = make(ctypes.byref(spec), (object,))
    cls._spec = spec  # kept with the type, whatever the C API keeps of it
    return cls


class _Plain:
    """Where the C API is not reachable (not CPython): no buffer protocol."""


_Base = _exporter_type() if hasattr(ctypes, "pythonapi") else _Plain


class BufferExporter(_Base):
    """A base class whose instances export ``_buffer_memory()``: (address,
    number of bytes, an object that keeps them alive). The view's ``obj``
    is the instance if ``_buffer_owned``, else None."""

    __slots__ = ()
    _buffer_owned = True

    def _buffer_memory(self) -> tuple[int, int, object]:
        raise NotImplementedError


class BufferConstant(BufferExporter):
    """The type of ``MPI.BOTTOM``, ``MPI.IN_PLACE`` and ``MPI.BUFFER_AUTOMATIC``,
    as mpi4py's: not an int, but equal to (and hashing as) its value, named
    by its repr, pickled by name, and a buffer of 0 bytes with no ``obj``.
    ``type(constant)()`` (whatever its arguments) is a new object equal to it."""

    __slots__ = ()
    _buffer_owned = False
    _name, _value = "", 0

    def __new__(cls, *args):
        return super().__new__(cls)

    def _buffer_memory(self) -> tuple[int, int, object]:
        return self._value, 0, None

    def __int__(self):
        return self._value

    def __eq__(self, other):
        if isinstance(other, (int, BufferConstant)):
            return self._value == int(other)
        return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        return hash(self._value)

    def __bool__(self):
        return bool(self._value)

    def __repr__(self):
        return self._name

    __str__ = __repr__

    def __reduce__(self):
        return self._name


class BottomType(BufferConstant):
    """Type of ``MPI.BOTTOM``."""

    __slots__ = ()
    _name, _value = "BOTTOM", 0

    def __index__(self):  # the one constant that is an address
        return self._value


class InPlaceType(BufferConstant):
    """Type of ``MPI.IN_PLACE``."""

    __slots__ = ()
    _name, _value = "IN_PLACE", 1


class BufferAutomaticType(BufferConstant):
    """Type of ``MPI.BUFFER_AUTOMATIC``."""

    __slots__ = ()
    _name, _value = "BUFFER_AUTOMATIC", -2


BOTTOM, IN_PLACE, BUFFER_AUTOMATIC = BottomType(), InPlaceType(), BufferAutomaticType()
