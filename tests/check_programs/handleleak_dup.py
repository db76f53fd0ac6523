# ranks: 2
# checks: misuse
# expect: handle-at-finalize, handle-leak
"""A function duplicates the world communicator for each call and drops the copy unfreed."""
from mpi4py import MPI


def total(value):
    comm = MPI.COMM_WORLD.Dup()
    return comm.allreduce(value)


for step in range(3):
    total(step)
