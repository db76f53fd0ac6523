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
    starts, ends, perms = _mappings()
    at, i = base, bisect.bisect_right(starts, base) - 1
    while at < end and 0 <= i < len(starts) and starts[i] <= at < ends[i]:
        if "r" not in perms[i] or (writable and "w" not in perms[i]):
            break
        at, i = ends[i], i + 1
    if at >= end:
        return
    span = f"bytes {base:#x} to {end - 1:#x}"
    if relative_to is not None:
        span += f" ({base - relative_to} to {end - 1 - relative_to} from its address {relative_to:#x})"
    access = "readable and writable" if writable else "readable"
    raise ValueError(f"message: the datatype of {what} reaches {span}, and the byte at {at:#x} is not {access} "
                     f"memory of this process; MPI would read or write memory the program does not own")


def _mappings() -> tuple[list[int], list[int], list[str]]:
    """This process's mappings, by start address: starts, ends and permissions."""
    starts, ends, perms = [], [], []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perm = line.split(None, 2)[:2]
            lo, hi = span.split("-")
            starts.append(int(lo, 16))
            ends.append(int(hi, 16))
            perms.append(perm)
    return starts, ends, perms
