# ranks: 3
# checks: race
# expect: none
"""Rank 0 sums integers from any source: the sum is the same in every order."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 0:
    total = sum(comm.recv(source=MPI.ANY_SOURCE, tag=0) for _ in range(comm.size - 1))
    print("sum", total)
else:
    comm.send(comm.rank * 10, dest=0, tag=0)
