# ranks: 2
# checks: misuse
# expect: type-mismatch
"""Rank 0 sends MPI.INT; rank 1 receives the bytes as MPI.FLOAT."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.Send([np.arange(4, dtype=np.int32), MPI.INT], dest=1, tag=0)
else:
    buf = np.zeros(4, dtype=np.float32)
    comm.Recv([buf, MPI.FLOAT], source=0, tag=0)
