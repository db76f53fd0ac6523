# ranks: 2
# checks: deadlock
# expect: deadlock
"""Rank 0 enters a Barrier; rank 1 waits for a message rank 0 sends only
after it: a cycle through a collective and a receive."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
buf = np.zeros(4)
if comm.rank == 0:
    comm.Barrier()
    comm.Send(buf, dest=1, tag=0)
else:
    comm.Recv(buf, source=0, tag=0)
    comm.Barrier()
