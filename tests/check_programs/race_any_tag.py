# ranks: 3
# checks: race
# expect: race
"""Rank 0 takes the first of two requests, whatever its sender and tag, and
serves it first: which one is first is a race."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 0:
    status = MPI.Status()
    comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
    print("serving tag", status.Get_tag(), "first")
    for _ in range(comm.size - 1):
        comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
else:
    comm.send(comm.rank, dest=0, tag=10 * comm.rank)
