"""The MPI backend: the communicator contract over mpi4py.

``MpiComm`` is imported on first use, because importing ``mpi4py.MPI``
initialises MPI; a driver that only launches ranks must not do that (a
singleton MPI process of Open MPI leaves a segment in /dev/shm behind).
"""

__all__ = ["MpiComm", "driver"]


def driver(size: int, timeout: float, mpiexec: str | None = None, *, check_calls: bool = False,
           sync_sends: bool = False, **hosts):
    """The driver of ``World(size, backend="mpi", ...)``: one that starts an
    MPI job, or, in a process an MPI launcher started, one that joins the
    launcher's job (``_spmd``). ``hosts``: World's hosts, hostfile, launcher
    and listen."""
    from ._hosts import placement
    from ._spmd import JobDriver, launched

    where = placement(**hosts)
    if launched() and not where.spread and mpiexec is None:
        return JobDriver(size, timeout, check_calls=check_calls, sync_sends=sync_sends)
    from ._driver import MpiDriver

    return MpiDriver(size, timeout, mpiexec, check_calls=check_calls, where=where, sync_sends=sync_sends)


def __getattr__(name):
    if name == "MpiComm":
        from ._comm import MpiComm

        return MpiComm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
