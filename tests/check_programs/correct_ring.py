# ranks: 3
# expect: none
"""A ring that posts its receive before it sends: correct under every check."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
out, into = np.full(1 << 16, comm.rank, dtype="f8"), np.empty(1 << 16)
req = comm.Irecv(into, source=left, tag=7)
comm.Send(out, dest=right, tag=7)
req.Wait()
assert into[0] == left
total = comm.allreduce(int(into[0]))
if comm.rank == 0:
    print("sum of left neighbours", total)
