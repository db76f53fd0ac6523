# ranks: 2
# checks: misuse
# expect: unreceived
"""Rank 0 sends two messages; rank 1 receives only the first."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.Send(np.arange(4.0), dest=1, tag=0)
    comm.Send(np.arange(4.0), dest=1, tag=1)
else:
    buf = np.zeros(4)
    comm.Recv(buf, source=0, tag=0)
