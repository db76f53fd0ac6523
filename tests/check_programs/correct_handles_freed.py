# ranks: 2
# checks: misuse
# expect: none
"""Every communicator, group, datatype and op made is freed."""
from mpi4py import MPI
import numpy as np

world = MPI.COMM_WORLD
comm = world.Dup()
half = world.Split(world.rank % 2, world.rank)
group = world.Get_group()
pair = group.Incl([0])
vector = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
op = MPI.Op.Create(lambda a, b, t: None, commute=True)
comm.Barrier()
for handle in (comm, half, group, pair, vector, op):
    handle.Free()
