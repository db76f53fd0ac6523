# ranks: 2
# checks: collective-order
# expect: collective-order
"""Rank 0 broadcasts while rank 1 reduces: the collectives do not match."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.bcast("hello", root=0)
else:
    comm.allreduce(1)
