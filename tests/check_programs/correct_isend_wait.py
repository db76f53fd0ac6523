# ranks: 2
# checks: misuse
# expect: none
"""Nonblocking sends and receives, each completed, the buffer written only after Wait."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out, got = np.arange(4.0) + comm.rank, np.zeros(4)
requests = [comm.Irecv(got, source=peer, tag=0), comm.Isend(out, dest=peer, tag=0)]
MPI.Request.Waitall(requests)
out[0] = got[0]
persistent = comm.Send_init(out, dest=peer, tag=1)
incoming = comm.Recv_init(got, source=peer, tag=1)
MPI.Prequest.Startall([persistent, incoming])
MPI.Request.Waitall([persistent, incoming])
persistent.Free()
incoming.Free()
MPI.Finalize()
