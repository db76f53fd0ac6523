# ranks: 2
# checks: deadlock
# expect: deadlock
"""Both ranks receive first: neither ever sends."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
buf = np.zeros(4)
comm.Recv(buf, source=peer, tag=0)
comm.Send(buf, dest=peer, tag=0)
