"""simdist: test distributed-training and collective code without a cluster.

N virtual devices run as N processes on one machine, joined by shared-memory
collectives whose results are deterministic to the bit.

PYTEST_DONT_REWRITE: ``simdist run`` imports this package before the
program's pytest starts, and pytest would warn (an error under a
``filterwarnings = error`` configuration) that it cannot rewrite it.
"""

from ._communicator import OPS, Communicator
from ._errors import (
    CollectiveMismatch,
    ChecksFailed,
    CollectiveTimeout,
    Deadlock,
    InvalidArgument,
    InvalidType,
    InvalidValue,
    RankDied,
    RankError,
    SimdistError,
)
from ._mpi4py_comm import Mpi4pyCommunicator, mpi4py_comm
from .mpi._spmd import comm
from ._world import World, run

__version__ = "0.1.0"

__all__ = [
    "Communicator",
    "OPS",
    "World",
    "run",
    "comm",
    "mpi4py_comm",
    "Mpi4pyCommunicator",
    "SimdistError",
    "RankError",
    "CollectiveMismatch",
    "ChecksFailed",
    "CollectiveTimeout",
    "Deadlock",
    "RankDied",
    "InvalidArgument",
    "InvalidType",
    "InvalidValue",
]
