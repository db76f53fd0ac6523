# ranks: 2
# expect: none
"""The exchange done right with a nonblocking send: Isend, Recv, Wait."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out, into = np.full(1 << 17, comm.rank, dtype="f8"), np.empty(1 << 17)
req = comm.Isend(out, dest=peer, tag=0)
comm.Recv(into, source=peer, tag=0)
req.Wait()
assert into[0] == peer
