# ranks: 2
# checks: misuse
# expect: finalize-pending
"""Rank 1 posts a receive no rank sends to, and finalizes with it pending."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
buf = np.zeros(4)
if comm.rank == 1:
    request = comm.Irecv(buf, source=0, tag=7)
MPI.Finalize()
