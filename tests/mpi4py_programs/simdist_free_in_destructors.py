"""Communicators freed by destructors, at another point on each rank: an
object that owns a Cartesian communicator and a Split of it frees them in
``__del__``; rank 0 keeps each object until a world collective later (a
reference in a list), the other ranks drop theirs at once. MPI_Comm_free
waits for no other member in Open MPI or MPICH, so the ranks that free
first go on to the world's calls (a Split and an allreduce) while rank 0
still holds the communicators; each Split after them may take a context
only the ranks that freed have given back. As a library that frees its
communicators when its object is collected (mpipartition's Partition)
does.

Origin: written for this project.
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()


class Decomposition:
    """A 1-D periodic grid of the ranks and the halves of it."""

    def __init__(self, comm):
        self.cart = comm.Create_cart([comm.size], periods=[True])
        self.half = self.cart.Split(self.cart.rank % 2, self.cart.rank)

    def __del__(self):
        self.half.Free()
        self.cart.Free()


kept = []
for step in range(4):
    grid = Decomposition(world)
    left, right = grid.cart.Shift(0, 1)
    across = grid.cart.sendrecv(rank, dest=right, source=left)
    halves = grid.half.allreduce(rank)
    if rank == 0:
        kept.append(grid)  # freed at the next step's world allreduce, below
    del grid  # the other ranks free now
    pair = world.Split(rank % 2, rank)  # may take a context only the other ranks have given back
    total = world.allreduce(step)
    if rank == 0 and len(kept) > 1:
        kept.pop(0)
    print(f"step {step} rank {rank}: from the left {across}, half sum {halves}, pair size {pair.size}, "
          f"world sum {total}")
    pair.Free()
kept.clear()
world.Barrier()
print(f"rank {rank}: done")
