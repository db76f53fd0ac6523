"""Memory known only by its address: ``MPI.BOTTOM`` with a datatype whose
displacements are addresses, and ``MPI.buffer.fromaddress(address, nbytes)``.

In C only the pointer matters: MPI reads and writes whatever bytes the
datatype reaches from it. An array, ``bytes`` or a ``bytearray`` has a
known extent, and a message that reaches past it is refused (see
``_buffers``). A buffer made from an address knows only the length its
caller claimed: a library that sends a column of a row-major matrix
passes the column's first element and a strided datatype that reaches far
past ``nbytes``, and Open MPI moves exactly the bytes the type map covers.
So there the datatype's reach is honoured, as for ``MPI.BOTTOM``; what is
checked is that those bytes are memory of this process, readable (and
writable, for a receive), so that a wrong address is an error naming the
span rather than a segmentation fault.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap

import numpy as np


def claimed_only(obj) -> bool:
    """Whether ``obj``'s length is only its maker's claim (``buffer.fromaddress``)."""
    return getattr(obj, "_claimed", False)


def placed(obj, memory: np.ndarray, layout, bottom: bool, writable: bool, what: str, too_far):
    """The memory a buffer's ``layout`` (see ``_layouts``) lies in, and the
    layout placed there: addresses for ``MPI.BOTTOM`` (``bottom``), past the
    claimed length of memory made from an address, else within ``memory``,
    which must hold it (a ValueError with the message ``too_far()`` if not)."""
    if bottom:
        return absolute_memory(layout, writable, what)
    if layout.nbytes and (layout.lo < 0 or layout.hi >= memory.size):
        if not claimed_only(obj):
            raise ValueError(too_far())
        return beyond_claim(obj, layout, writable, what)
    return memory, layout


def beyond_claim(obj, layout, writable: bool, what: str):
    """The memory ``layout`` (see ``_layouts``; bytes relative to ``obj``'s
    address, any sign) reaches, and the layout placed in it."""
    return absolute_memory(layout.at(obj.address), writable, what, relative_to=obj.address)


def absolute_memory(layout, writable: bool, what: str = "buf", *, relative_to: int | None = None):
    """The memory ``layout`` (absolute addresses) reaches, and the layout placed in it."""
    if not layout.nbytes:
        return np.empty(0, np.uint8), layout
    base, end = layout.lo, layout.hi + 1
    if base <= 0:
        raise ValueError(f"message: MPI.BOTTOM with a datatype whose displacement {base} is not an address")
    _check_mapped(base, end, writable, what, relative_to)
    memory = np.ctypeslib.as_array((ctypes.c_ubyte * (end - base)).from_address(base))
    if not writable:
        memory.flags.writeable = False
    return memory, layout.at(-base)


def _check_mapped(base: int, end: int, writable: bool, what: str, relative_to: int | None) -> None:
    """ValueError unless every byte of [base, end) is in a mapping of this
    process that is readable (and writable, if ``writable``)."""
    at = unmapped_byte(base, end, writable)
    if at is None:
        return
    span = f"bytes {base:#x} to {end - 1:#x}"
    if relative_to is not None:
        span += f" ({base - relative_to} to {end - 1 - relative_to} from its address {relative_to:#x})"
    access = "readable and writable" if writable else "readable"
    raise ValueError(f"message: the datatype of {what} reaches {span}, and the byte at {at:#x} is not {access} "
                     f"memory of this process; MPI would read or write memory the program does not own")


def unmapped_byte(base: int, end: int, writable: bool) -> int | None:
    """The first byte of [base, end) that is not readable (and writable, if
    ``writable``) memory of this process, or None (Linux: /proc/self/maps).

    A program sends from the same memory again and again, and reading the
    file at every message made such sends slow (0.7 ms each where a process
    has 600 mappings): the mappings read last answer first, and mincore(2)
    confirms their pages are still mapped, so memory unmapped since is seen;
    otherwise the file is read again. (Access taken from mapped pages since,
    with mprotect, is not seen.)"""
    if _reached(base, end, writable) >= end and _pages_mapped(base, end):
        return None
    _read_mappings()
    at = _reached(base, end, writable)
    return None if at >= end else at


_MAPPINGS: list[tuple[int, int, str]] = []  # (low, high, perms) as last read, by address


def _read_mappings() -> None:
    try:
        with open("/proc/self/maps") as maps:
            spans = [line.split(None, 2)[:2] for line in maps]
    except OSError:
        spans = []
    _MAPPINGS[:] = sorted((*(int(x, 16) for x in span.split("-")), perms) for span, perms in spans)


def _reached(address: int, end: int, writable: bool) -> int:
    """The first byte from ``address`` on that the mappings read last do
    not hold with the access needed (``end`` if they hold all to ``end``)."""
    need = "rw" if writable else "r"
    index = bisect.bisect_right(_MAPPINGS, (address, float("inf"))) - 1
    for low, high, perms in _MAPPINGS[max(index, 0):]:
        if not low <= address < high or not all(p in perms for p in need):
            return address
        if end <= high:
            return end
        address = high  # the range continues in the next mapping
    return address


_libc = ctypes.CDLL(None, use_errno=True)
_mincore = getattr(_libc, "mincore", None)
if _mincore is not None:
    _mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    _mincore.restype = ctypes.c_int


def _pages_mapped(base: int, end: int) -> bool:
    """Whether every page of [base, end) is mapped now (mincore fails with
    ENOMEM on one that is not)."""
    if _mincore is None:
        return False
    low = base - base % mmap.PAGESIZE
    pages = np.empty(-(-(end - low) // mmap.PAGESIZE), np.uint8)
    return _mincore(low, end - low, pages.ctypes.data) == 0
