"""Communicator management: MPI.COMM_WORLD and MPI.COMM_SELF, Get_rank,
Get_size and the rank/size properties, Comm.Dup, Comm.Clone, Comm.Split
(colour and key, and MPI.UNDEFINED giving MPI.COMM_NULL), Comm.Free, and
collectives and point-to-point on the new communicators, which do not mix
with those of their parents.

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
assert (world.rank, world.size) == (rank, size)

me = MPI.COMM_SELF
print(f"rank {rank}: COMM_SELF rank {me.Get_rank()} size {me.Get_size()} "
      f"bcast {me.bcast('self', root=0)} allreduce {me.allreduce(rank + 1)}")

dup = world.Dup()
clone = world.Clone()
print(f"rank {rank}: Dup rank {dup.rank} size {dup.size}; Clone rank {clone.rank} size {clone.size}")

# a message on the duplicate does not match a receive on the world
if size >= 2 and rank < 2:
    other = 1 - rank
    world.send(f"world from {rank}", dest=other, tag=5)  # simdist: allow[buffering] (small: MPI buffers it)
    dup.send(f"dup from {rank}", dest=other, tag=5)  # simdist: allow[buffering]
    got_dup = dup.recv(source=other, tag=5)
    got_world = world.recv(source=other, tag=5)
    print(f"rank {rank}: got on dup {got_dup!r}, on world {got_world!r}")

# key reverses the order inside each colour
half = world.Split(color=rank % 2, key=size - rank)
members = half.allgather(rank)
print(f"rank {rank}: Split colour {rank % 2} rank {half.Get_rank()} of {half.Get_size()} members {members}")
total = np.zeros(1, dtype='i')
half.Allreduce(np.array([rank], dtype='i'), total)
print(f"rank {rank}: Allreduce on the half {total.tolist()}")

sub = world.Split(color=0 if rank == 0 else MPI.UNDEFINED, key=0)
print(f"rank {rank}: Split UNDEFINED gives COMM_NULL: {sub == MPI.COMM_NULL}")
if sub != MPI.COMM_NULL:
    print(f"rank {rank}: the one-rank communicator has size {sub.Get_size()}")
    sub.Free()

for comm in (half, clone, dup):
    comm.Barrier()
    comm.Free()
print(f"rank {rank}: freed, half is COMM_NULL: {half == MPI.COMM_NULL}")
world.Barrier()
