# ranks: 2
# checks: misuse,-handle-at-finalize
# expect: none
"""Handles freed when done, or kept for the whole program (MPI frees those at Finalize;
only handle-at-finalize, left out here, reports them)."""
from mpi4py import MPI

world = MPI.COMM_WORLD
kept = world.Split(world.rank % 2, world.rank)  # kept to the end: not a leak


def total(value):
    comm = world.Dup()
    group = comm.Get_group()
    vector = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        return comm.allreduce(value) + group.Get_size()
    finally:
        for handle in (comm, group, vector, op):
            handle.Free()


for step in range(3):
    total(step)
kept.Barrier()
