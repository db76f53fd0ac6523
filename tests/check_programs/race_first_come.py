# ranks: 3
# checks: race
# expect: race
"""Rank 0 prints the senders in the order their messages came: the order is a race."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 0:
    status = MPI.Status()
    for _ in range(comm.size - 1):
        comm.recv(source=MPI.ANY_SOURCE, tag=0, status=status)
        print("from", status.Get_source())
else:
    comm.send(comm.rank, dest=0, tag=0)
