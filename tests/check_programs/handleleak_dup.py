# ranks: 2
# checks: misuse
# expect: handle-leak
"""Each rank duplicates the world communicator and never frees the copy."""
from mpi4py import MPI

comm = MPI.COMM_WORLD.Dup()
total = comm.allreduce(comm.rank)
