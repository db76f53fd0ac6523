# ranks: 2
# checks: misuse
# expect: buffer-in-use
"""Rank 0 writes the buffer of an Isend before waiting for it."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
buf = np.arange(4.0)
if comm.rank == 0:
    request = comm.Isend(buf, dest=1, tag=0)
    buf[0] = 42.0
    request.Wait()
else:
    comm.Recv(buf, source=0, tag=0)
