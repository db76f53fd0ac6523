"""The MPI backend: the communicator contract over mpi4py.

``MpiComm`` is imported on first use, because importing ``mpi4py.MPI``
initialises MPI; a driver that only launches ranks must not do that (a
singleton MPI process of Open MPI leaves a segment in /dev/shm behind).
"""

__all__ = ["MpiComm"]


def __getattr__(name):
    if name == "MpiComm":
        from ._comm import MpiComm

        return MpiComm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
