# ranks: 2
# checks: buffering
# expect: buffering
"""The same exchange at 1 MiB: a hang under any MPI; the buffering check
reports both sends and lets them complete, so the run ends."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out, into = np.full(1 << 17, comm.rank, dtype="f8"), np.empty(1 << 17)
comm.Send(out, dest=peer, tag=0)
comm.Recv(into, source=peer, tag=0)
assert into[0] == peer
