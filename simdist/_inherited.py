"""What a process forked from a driver lets go of: the open worlds' descriptors and memory.

A child made by ``fork`` starts as a copy of its parent, with every
descriptor and every mapping of every world open there: a simulator worker
of world B, started while world A is open, would hold A's shared memory
(its memfd and its mapping), A's lifeline, A's pipes to its workers and,
for an MPI world, A's listening socket. ``A.close()`` would then free
nothing (the memory stays allocated and the port keeps listening until B's
workers end), and A's workers would not see their driver die while B's
workers live. The same holds for any child the driver's own code forks.

So every object of simdist that holds such resources in a driver -- a
world's driver, the janitor's pipe -- registers here, and in every child
forked from this process, before any other code runs there
(``os.register_at_fork``), each is told to ``release_inherited(keep)``:
close its descriptors except those in ``keep`` (those a worker being
started needs, see :func:`keeping`: its own world's arena stays as it is)
and replace its shared mappings with inaccessible private ones
(:func:`unmap_shared`), so that the memory goes with the parent's last
mapping. The objects stay behind in the child, unusable: a world used
there raises ``SimdistError``. An object closed before the fork does
nothing: the numbers it held may belong to other files by then.

Only descriptors that simdist created are closed, through the objects that
own them, so nothing closes them twice. The copy of its file that an
``mmap`` object keeps is made to point to /dev/null instead
(:func:`disown`): the object closes that number itself one day.
Descriptors of other objects are left alone. Children that ``exec``
(spawn, the MPI job, subprocesses) keep nothing anyway: simdist's
descriptors are all close-on-exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import weakref

_holders: "weakref.WeakSet" = weakref.WeakSet()  # objects with release_inherited(keep)
_forking = threading.local()  # .keep: the descriptors a child forked by this thread needs


def track(holder) -> None:
    """Have ``holder.release_inherited(keep)`` called in every child forked from here."""
    _holders.add(holder)


def untrack(holder) -> None:
    _holders.discard(holder)


@contextlib.contextmanager
def keeping(fds):
    """Within: children that this thread forks keep the descriptors ``fds``
    (a worker's own)."""
    previous = getattr(_forking, "keep", frozenset())
    _forking.keep = frozenset(fds)
    try:
        yield
    finally:
        _forking.keep = previous


def _release_in_child() -> None:
    holders = list(_holders)
    _holders.clear()
    keep = getattr(_forking, "keep", frozenset())
    _forking.keep = frozenset()
    for holder in holders:
        try:
            holder.release_inherited(keep)
        except Exception:  # pragma: no cover - never break a fork
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_release_in_child)


def close_fd(fd: int | None, keep=frozenset()) -> int | None:
    """Close ``fd`` unless it is kept; return what the owner should hold now."""
    if fd is None or fd in keep:
        return fd
    try:
        os.close(fd)
    except OSError:
        pass
    return None


def copies_of(fd: int) -> list[int]:
    """The other descriptors of this process open on ``fd``'s file, such as
    the copy an ``mmap`` object keeps of the file it maps."""
    st = os.fstat(fd)
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            other = os.stat(int(name))
        except OSError:  # the listing's own descriptor, closed since
            continue
        if int(name) != fd and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            found.append(int(name))
    return found


def disown(fds) -> None:
    """Point the descriptors ``fds`` to /dev/null.

    For descriptors whose owner is out of reach, such as the copy an
    ``mmap`` object keeps of the file it maps: the owner still holds the
    number and closes it one day, so no number is closed twice.
    """
    if not fds:
        return
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for fd in fds:
            os.dup2(devnull, fd, inheritable=False)
    finally:
        os.close(devnull)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_PROT_NONE, _MAP_FIXED, _MAP_NORESERVE = 0, 0x10, 0x4000


def unmap_shared(address: int, length: int) -> bool:
    """Put an inaccessible private mapping over the shared memory mapped
    at ``address``.

    The shared memory is then no longer held by this process, while the
    ``mmap`` object that maps it stays valid: closing it later unmaps the
    placeholder. Any access faults. Returns False where it cannot.
    """
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED | _MAP_NORESERVE
    return _libc.mmap(address, length, _PROT_NONE, flags, -1, 0) == address
