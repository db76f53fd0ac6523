# ranks: 2
# checks: misuse
# expect: request-leak
"""Rank 0 sends with Isend and never waits for the request (the message still goes)."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.Isend(np.arange(4.0), dest=1, tag=0)
else:
    buf = np.zeros(4)
    comm.Recv(buf, source=0, tag=0)
