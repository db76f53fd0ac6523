"""Intercommunicators: Intracomm.Create_intercomm between the even and the
odd ranks, Intercomm (Get_remote_size, Get_remote_group), point to point
to remote ranks, bcast/Bcast with MPI.ROOT and MPI.PROC_NULL, Gather,
Reduce, allgather, allreduce, Allreduce, alltoall, Merge, Dup, Split,
mpi4py.util.pkl5's Intercomm; Bcast and Alltoallw into derived datatypes,
Reduce_scatter (and its refusal without counts or with counts that do
not add up to the send count).

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
color = rank % 2
local = world.Split(color, rank)
inter = local.Create_intercomm(0, world, 1 - color, tag=7)
print(rank, "sizes", inter.Get_size(), inter.Get_rank(), inter.Get_remote_size(),
      inter.Get_remote_group().Translate_ranks(None, world.Get_group()))
if inter.rank == 0:
    inter.send(("hi", rank), dest=0, tag=3)  # simdist: allow[buffering] (small: MPI buffers it)
    print(rank, "got", inter.recv(source=0, tag=3))
root = (MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL) if color == 0 else 0
print(rank, "bcast", inter.bcast(("data", rank) if root == MPI.ROOT else None, root))
buf = np.arange(4.0) if root == MPI.ROOT else np.zeros(4)
inter.Bcast(buf, root)
print(rank, "Bcast", buf.tolist())
gathered = np.zeros(inter.remote_size, "i") if root == MPI.ROOT else None
inter.Gather(np.array([rank * 10], "i"), gathered, root)
reduced = np.zeros(1) if root == MPI.ROOT else None
inter.Reduce(np.array([rank + 0.25]), reduced, MPI.SUM, root)
if root == MPI.ROOT:
    print(rank, "Gather", gathered.tolist(), "Reduce", reduced.tolist())
print(rank, "allgather", inter.allgather(rank), "allreduce", inter.allreduce(rank))
out = np.zeros(2)
inter.Allreduce(np.array([rank, rank * 0.5]), out, MPI.MAX)
print(rank, "Allreduce", out.tolist(), "alltoall", inter.alltoall([(rank, j) for j in range(inter.remote_size)]))
merged = inter.Merge(high=bool(color))
print(rank, "Merge", merged.rank, merged.size, merged.allgather(rank))
dup = inter.Dup()
print(rank, "Dup", dup.Compare(inter) == MPI.CONGRUENT, dup.allreduce(1))
half = inter.Split(0 if inter.rank == 0 else MPI.UNDEFINED)
if half != MPI.COMM_NULL:
    print(rank, "Split", half.size, half.remote_size, half.allgather(rank))
    half.Free()
every_other = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
strided = np.full(6, -1.0)
inter.Bcast([np.arange(3.0), MPI.DOUBLE] if root == MPI.ROOT else [strided, 1, every_other], root)
print(rank, "Bcast vector", strided.tolist())
n = inter.remote_size
pairs = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
spread = np.full(4 * n, -1.0)
inter.Alltoallw([np.arange(2.0 * n) + 100 * rank, ([2] * n, [16 * j for j in range(n)]), [MPI.DOUBLE] * n],
                [spread, ([1] * n, [32 * j for j in range(n)]), [pairs] * n])
print(rank, "Alltoallw", spread.tolist())
counts = [6 // inter.size + (j < 6 % inter.size) for j in range(inter.size)]  # both groups' sum to 6
part = np.zeros(counts[inter.rank], "i")
inter.Reduce_scatter(np.arange(6, dtype="i") * (rank + 1), part, counts, MPI.SUM)
print(rank, "Reduce_scatter", part.tolist())
for bad in (None, [1] * inter.size if 6 % inter.size == 0 else [6] * inter.size):
    try:
        inter.Reduce_scatter(np.arange(6, dtype="i"), part, bad, MPI.SUM)
    except (TypeError, ValueError) as error:
        print(rank, "Reduce_scatter refused", type(error).__name__)
for datatype in (every_other, pairs):
    datatype.Free()
pc = pkl5.Intercomm(inter)
print(rank, "pkl5", pc.bcast(("x", rank) if root == MPI.ROOT else None, root), pc.allgather(rank))
for comm in (dup, merged, inter, local):
    comm.Free()
