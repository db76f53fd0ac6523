"""``MPI._sizeof``, ``MPI._addressof`` and ``MPI._handleof``: a handle as C
code sees it.

Over a C MPI library these give the size of the C handle type, the address
of the handle inside the Python object, and the handle's value, so that a
program can pass handles to C through ctypes or cffi and back
(``MPI.Comm.fromhandle``). Here a handle's value is the stand-in's integer
for it (``handle``, ``toint``), which ``fromhandle`` takes back; the C
handle types are pointer-sized, as in the MPI 5 ABI and Open MPI, and
``MPI_Status`` is the stand-in's 24 bytes, as Open MPI's. The address is
that of a pointer-sized cell the object keeps, holding its value as of
the call: C code can read a handle there, but a value written there does
not change the object (no C library reads it). A status's handle is the
address of its fields, as in mpi4py.
"""

from __future__ import annotations

import ctypes

from ._handles import IntegerHandles
from ._status import Status

_HANDLE_BYTES = ctypes.sizeof(ctypes.c_void_p)


def _sizeof(arg) -> int:
    """Size in bytes of the underlying MPI handle."""
    cls = arg if isinstance(arg, type) else type(arg)
    if issubclass(cls, Status):
        return Status()._c.nbytes
    if issubclass(cls, IntegerHandles):
        return _HANDLE_BYTES
    raise TypeError("expecting an MPI type or instance")


def _addressof(arg) -> int:
    """Memory address of the underlying MPI handle."""
    if isinstance(arg, Status):
        return arg._c.ctypes.data
    if isinstance(arg, IntegerHandles):
        cell = arg.__dict__.get("_handle_cell")
        if cell is None:
            cell = arg._handle_cell = ctypes.c_size_t()
        cell.value = arg.handle
        return ctypes.addressof(cell)
    raise TypeError("expecting an MPI instance")


def _handleof(arg) -> int:
    """Unsigned integer value with the underlying MPI handle."""
    if isinstance(arg, Status):
        return arg._c.ctypes.data
    if isinstance(arg, IntegerHandles):
        return arg.handle
    raise TypeError("expecting an MPI instance")
