"""mpi4py's communicator locks: ``MPI._comm_lock`` and ``MPI._comm_lock_table``.

mpi4py keeps, per communicator, a table of ``threading.Lock`` by key and
holds the lock of a call's name ("bcast", "gather", "scatter",
"allgather", "alltoall") around the messages of one lowercase (pickled)
collective, so that threads do not interleave the two messages of such a
call; ``mpi4py.util.pkl5`` takes the same locks. The lock is not held
while objects are pickled or unpickled.
The stand-in keeps the same table, in the communicator's state, and its
object collectives take the same keys the same way (``_objects``,
``_intercoll``).
"""

from __future__ import annotations

import threading

_TABLES = threading.Lock()  # guards the creation of a lock in any table


def _comm_lock_table(comm) -> dict:
    """The communicator's table of locks (mpi4py's internal dict)."""
    return comm._st().locks


def _comm_lock(comm, key=None) -> threading.Lock:
    """The communicator's lock of ``key``, made on first use."""
    table = _comm_lock_table(comm)
    with _TABLES:
        return table.setdefault(key, threading.Lock())
