"""Buffers given by DLPack (``__dlpack__``) or the CUDA array interface
(``__cuda_array_interface__``), read as mpi4py reads them.

mpi4py takes a message buffer from the buffer protocol first, then from
DLPack, then from the CUDA array interface, with the same checks as here
(a contiguous layout, a writable buffer where the call writes, the
version of DLPack, the byte order of a ``typestr``) and the same error
messages. The memory must be host memory of this process: a DLPack tensor
on the CPU (or CUDA host, ROCm host, CUDA managed memory), or a tensor of
another device or a ``__cuda_array_interface__`` whose pointer lies in this
process's mapped memory. Device memory cannot be simulated: it raises
BufferError("buffer is not CPU-accessible", mpi4py's words for memory the
CPU cannot reach, and why).

``memory(obj, writable)`` gives ``(bytes as a numpy uint8 array, format)``,
the format being the buffer format character mpi4py derives (``"d"``,
``"Zf"``, ``"B"`` for anything else), or None when ``obj`` has neither
interface.
"""

from __future__ import annotations

import ctypes
import math
import operator
import sys
import warnings

import numpy as np

from ._addressed import unmapped_byte

K_DL_CPU, K_DL_CUDA, K_DL_CUDA_HOST, K_DL_ROCM_HOST, K_DL_CUDA_MANAGED = 1, 2, 3, 11, 13
_HOST_DEVICES = (K_DL_CPU, K_DL_CUDA_HOST, K_DL_ROCM_HOST, K_DL_CUDA_MANAGED)
K_DL_INT, K_DL_UINT, K_DL_FLOAT, K_DL_COMPLEX, K_DL_BOOL = 0, 1, 2, 5, 6
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
NOT_CPU = "buffer is not CPU-accessible"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # DLManagedTensor (DLPack 0.x)
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned (DLPack 1.x)
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class _Memory:
    """``nbytes`` bytes at ``address``, kept alive by ``owner``, for numpy."""

    def __init__(self, address: int, nbytes: int, readonly: bool, owner):
        self.__array_interface__ = {"data": (address, readonly), "shape": (nbytes,), "typestr": "|u1",
                                    "version": 3}
        self.owner = owner


def _array(address: int, nbytes: int, readonly: bool, owner) -> np.ndarray:
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.asarray(_Memory(address, nbytes, readonly, owner))


def memory(obj, writable: bool):
    """See the module docstring."""
    if hasattr(obj, "__dlpack__"):
        try:
            return _dlpack(obj, writable)
        except NotImplementedError:  # no __dlpack_device__: mpi4py tries the next interface
            pass
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda_array_interface(obj, writable)
    return None


def device_kind(obj) -> int:
    """mpi4py's kind of a buffer it read: 0 for the buffer protocol, else the
    DLPack device type (kDLCUDA for the CUDA array interface)."""
    try:
        memoryview(obj)
        return 0
    except TypeError:
        pass
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return operator.index(obj.__dlpack_device__()[0])
    return K_DL_CUDA if hasattr(obj, "__cuda_array_interface__") else 0


def check_cpu_accessible(kind: int) -> None:
    """mpi4py's BufferError for reading or writing device memory from the CPU."""
    if kind and kind not in _HOST_DEVICES:
        raise BufferError(NOT_CPU)


# -- DLPack ---------------------------------------------------------------------------
def _dlpack(obj, writable: bool):
    try:
        device = obj.__dlpack_device__
    except AttributeError:
        raise NotImplementedError("dlpack: missing support") from None
    device_type, device_id = device()
    device_type, _ = operator.index(device_type), operator.index(device_id)
    try:  # DLPack 1.0 and later (on a device, mpi4py asks for its memory in the default stream)
        stream = {} if device_type == K_DL_CPU else {"stream": -1}
        capsule, name = obj.__dlpack__(max_version=(1, 0), copy=False, **stream), b"dltensor_versioned"
    except TypeError:  # DLPack 0.x
        capsule, name = obj.__dlpack__(**stream), b"dltensor"
    if not _capsule_valid(capsule, name):
        raise BufferError("dlpack: invalid capsule object")
    pointer = _capsule_pointer(capsule, name)
    if name == b"dltensor_versioned":
        managed = _ManagedVersioned.from_address(pointer)
        if managed.version.major < 1:
            raise BufferError("dlpack: unexpected version")
        readonly = bool(managed.flags & _READ_ONLY)
    else:
        managed, readonly = _Managed.from_address(pointer), False
    tensor = managed.dl_tensor
    shape = _checked_layout(tensor)
    if readonly and writable:
        raise BufferError("dlpack: buffer is not writable")
    dtype = tensor.dtype
    nbytes = math.prod(shape) * ((dtype.bits * dtype.lanes + 7) // 8)
    address = (tensor.data or 0) + tensor.byte_offset
    if nbytes and device_type not in _HOST_DEVICES and not _host_memory(address, nbytes, writable):
        raise BufferError(f"{NOT_CPU}: a DLPack tensor on device type {device_type} at {hex(address)}; device "
                          "memory cannot be simulated, pass host memory (a numpy array)")
    return _array(address, nbytes, readonly, capsule), _dlpack_format(dtype.code, dtype.bits, dtype.lanes)


def _checked_layout(tensor) -> list[int]:
    """The shape of a DLPack tensor, checked as mpi4py checks it."""
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferError("dlpack: number of dimensions is negative")
    if ndim > 0 and not tensor.shape:
        raise BufferError("dlpack: shape is NULL")
    shape = [tensor.shape[i] for i in range(ndim)]
    if any(n < 0 for n in shape):
        raise BufferError("dlpack: shape item is negative")
    strides = [tensor.strides[i] for i in range(ndim)] if tensor.strides else None
    if strides is not None and any(s < 0 for s in strides):
        raise BufferError("dlpack: strides item is negative")
    if strides is None:
        contiguous = True
    else:
        contiguous = _contiguous(shape, strides, 1, "C") or _contiguous(shape, strides, 1, "F")
    if not contiguous:
        raise BufferError("dlpack: buffer is not contiguous")
    return shape


def _contiguous(shape, strides, unit: int, order: str) -> bool:
    """Whether ``strides`` (in units of ``unit``) lay ``shape`` out densely in C or Fortran order."""
    size = unit
    for dim, stride in (zip(shape, strides) if order == "F" else zip(reversed(shape), reversed(strides))):
        if dim > 1 and stride != size:
            return False
        size *= dim
    return True


_C_SIZES = {"char": 1, "short": ctypes.sizeof(ctypes.c_short), "int": ctypes.sizeof(ctypes.c_int),
            "long": ctypes.sizeof(ctypes.c_long), "long long": ctypes.sizeof(ctypes.c_longlong),
            "float": 4, "double": 8, "long double": ctypes.sizeof(ctypes.c_longdouble)}


def _int_format(itemsize: int, signed: bool) -> str | None:
    for ctype, char in (("char", "b"), ("short", "h"), ("int", "i"), ("long", "l"), ("long long", "q")):
        if itemsize == _C_SIZES[ctype]:
            return char if signed else char.upper()
    return None


def _float_format(itemsize: int) -> str | None:
    return {2: "e", 4: "f", 8: "d", _C_SIZES["long double"]: "g"}.get(itemsize)


def _dlpack_format(code: int, bits: int, lanes: int) -> str:
    if lanes != 1:
        if code == K_DL_FLOAT and lanes == 2 and bits // 8 in (4, 8, _C_SIZES["long double"]):
            return "Z" + _float_format(bits // 8)
        return "B"
    return _format(code, bits // 8 if bits % 8 == 0 else 0) or "B"


def _format(code: int, itemsize: int) -> str | None:
    """The buffer format of a DLPack type code (or the same kinds of a CUDA typestr)."""
    if code == K_DL_BOOL:
        return "?" if itemsize == 1 else None
    if code in (K_DL_INT, K_DL_UINT):
        return _int_format(itemsize, code == K_DL_INT)
    if code == K_DL_FLOAT:
        return _float_format(itemsize)
    if code == K_DL_COMPLEX and itemsize % 2 == 0:
        part = _float_format(itemsize // 2)
        return None if part is None else "Z" + part
    return None


# -- the CUDA array interface ------------------------------------------------------------
_KINDS = {"b": K_DL_BOOL, "i": K_DL_INT, "u": K_DL_UINT, "f": K_DL_FLOAT, "c": K_DL_COMPLEX}


def _cuda_array_interface(obj, writable: bool):
    cai = obj.__cuda_array_interface__
    data, typestr, shape = _typed(cai["data"], tuple), _typed(cai["typestr"], str), _typed(cai["shape"], tuple)
    strides, descr = _typed(cai.get("strides"), tuple, True), _typed(cai.get("descr"), list, True)
    address, readonly = data
    mask = cai.get("mask")
    itemsize, size = int(typestr[2:]), math.prod(shape)
    native = "<" if sys.byteorder == "little" else ">"
    if typestr[0] in "<>" and typestr[0] != native:
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} with non-native byte order")
    if typestr[0] not in "<>|":
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} with unrecognized byte order")
    if mask is not None:
        raise BufferError("__cuda_array_interface__: cannot handle masked arrays")
    if size < 0:
        raise BufferError(f"__cuda_array_interface__: buffer with negative size (shape:{shape}, size:{size})")
    if strides is not None and not (_contiguous(shape, strides, itemsize, "C")
                                    or _contiguous(shape, strides, itemsize, "F")):
        raise BufferError(f"__cuda_array_interface__: buffer is not contiguous "
                          f"(shape:{shape}, strides:{tuple(strides)}, itemsize:{itemsize})")
    if readonly and writable:
        raise BufferError("__cuda_array_interface__: buffer is not writable")
    if descr is not None and (len(descr) != 1 or descr[0] != ("", typestr)):
        warnings.warn("__cuda_array_interface__: ignoring 'descr' key", RuntimeWarning, stacklevel=2)
    nbytes = size * itemsize
    if nbytes and not _host_memory(address or 0, nbytes, writable):
        raise BufferError(f"{NOT_CPU}: __cuda_array_interface__ memory at {hex(address or 0)} is not host memory "
                          "of this process; device memory cannot be simulated, pass host memory (a numpy array)")
    fmt = _format(_KINDS.get(typestr[1], -1), itemsize) or "B"
    return _array(address or 0, nbytes, bool(readonly), obj), fmt


def _typed(value, kind: type, optional: bool = False):
    """``value``, of the type mpi4py declares for it (TypeError otherwise)."""
    if not isinstance(value, kind) and not (optional and value is None):
        raise TypeError(f"__cuda_array_interface__: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _host_memory(address: int, nbytes: int, writable: bool) -> bool:
    """Whether ``[address, address + nbytes)`` is mapped readable (and
    writable) memory of this process (``_addressed.unmapped_byte``)."""
    return unmapped_byte(address, address + nbytes, writable) is None
