"""A /dev/shm of the test process's own, so that the leak guard blames a
test only for what its own processes created.

On a shared machine other users' MPI jobs create and leave files in
/dev/shm at any time (Open MPI's ``sm_segment.*``, a singleton's segment
that outlives it, ``open_mpi.*``), and nothing in a file of a tmpfs says
which process made it. So, where it may (as root), each pytest process
(the xdist controller and every worker) moves into a mount namespace of
its own and mounts a fresh tmpfs on /dev/shm there. Every process it then
starts (ranks, ``mpiexec`` and its daemons, Slurm's daemons, processes in
network namespaces) inherits that mount, so whatever appears in it is
this process's doing, and whatever a test leaves there is a real leak.
Processes outside the tree neither see it nor write to it.

Where the namespace cannot be made (not root, no ``unshare``), the guard
falls back to telling other jobs' files by the processes that map them
(``conftest._mapped_by_others``), which misses files whose job has ended.
"""

from __future__ import annotations

import ctypes
import os

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18

# The mount namespace this process started in (kept open so a test can
# create a file "from another job" there: /proc/PID/fd/N is a namespace
# path for nsenter). None until make_private succeeds.
host_namespace_fd: int | None = None


def make_private() -> bool:
    """Give this process (its calling thread, and every process it starts
    from now on) a private, empty /dev/shm. True if it did; False, with
    nothing changed, where it may not."""
    global host_namespace_fd
    if host_namespace_fd is not None:
        return True
    if os.geteuid() != 0 or os.environ.get("SIMDIST_TESTS_SHARED_SHM"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    if libc.unshare(_CLONE_NEWNS) != 0:
        os.close(original)
        return False
    # Private propagation first: otherwise the tmpfs would be mounted on
    # the host's /dev/shm too (systemd makes / a shared mount).
    ok = libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0 and (
        libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"mode=1777") == 0
    )
    if not ok:
        libc.setns(original, _CLONE_NEWNS)  # back where it started
        os.close(original)
        return False
    host_namespace_fd = original
    return True


def is_private() -> bool:
    """True if this process's /dev/shm is its own (make_private succeeded)."""
    return host_namespace_fd is not None


def host_namespace_path() -> str:
    """A path naming the mount namespace this process started in (for
    ``nsenter --mount=PATH``); only once :func:`make_private` succeeded."""
    assert host_namespace_fd is not None, "make_private() has not succeeded"
    return f"/proc/{os.getpid()}/fd/{host_namespace_fd}"
