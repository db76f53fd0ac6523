# ranks: 2
# checks: handle-at-finalize
# expect: handle-at-finalize
"""A communicator and datatypes kept to the end, never freed: MPI.Finalize frees them, a correctness tool reports them."""
from mpi4py import MPI
import numpy as np

world = MPI.COMM_WORLD
halves = world.Split(world.rank % 2, world.rank)
columns = [MPI.DOUBLE.Create_vector(4, 1, 4).Commit() for _ in range(2)]
scratch = world.Dup()
scratch.Free()  # freed: not reported
print(halves.allreduce(1), np.zeros(16).nbytes, columns[0].Get_size())
MPI.Finalize()
