# ranks: 2
# checks: read-before-wait
# expect: read-before-wait
"""The receive buffer is printed before Wait: the zeros or the message, depending on when the message lands."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
halo = np.zeros(4)
request = comm.Irecv(halo, source=peer, tag=0)
comm.Send(np.full(4, comm.rank + 1.0), dest=peer, tag=0)
comm.Barrier()
print("halo before wait", halo.sum())
request.Wait()
