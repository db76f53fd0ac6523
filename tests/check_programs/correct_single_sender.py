# ranks: 3
# checks: race
# expect: none
"""Rank 0 receives from ANY_SOURCE, but only rank 1 ever sends to it."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 0:
    for _ in range(3):
        print("got", comm.recv(source=MPI.ANY_SOURCE, tag=0))
elif comm.rank == 1:
    for i in range(3):
        comm.send(i, dest=0, tag=0)
