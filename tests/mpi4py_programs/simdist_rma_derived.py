"""One-sided calls with derived datatypes on either side: a Put into and
a Get out of every other element (a vector type), the shared counter of
mpi4py's demo/nxtval/nxtval-onesided.py (an exclusive lock around an
Accumulate and a Get of an indexed type that skips the caller's slot),
and a Get_accumulate through a vector target type.

Origin: written for this project, after mpi4py's nxtval demo.
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
n = 4 * size
mem = np.full(n, -1, np.int32)
win = MPI.Win.Create(mem, 4, comm=comm)
every_other = MPI.INT.Create_vector(size, 1, 2).Commit()
but_mine = MPI.INT.Create_indexed([rank, size - rank - 1], [0, rank + 1]).Commit()
right, left = (rank + 1) % size, (rank - 1) % size
win.Fence()
win.Put(np.full(size, rank, np.int32), right, (1, 1, every_other))
win.Fence()
got = np.full(2 * size, -7, np.int32)
win.Get([got, 1, every_other], left, (1, 1, every_other))
win.Fence()
print(rank, "put", mem.tolist(), "get", got.tolist(), flush=True)
win.Fence()
mem[:] = 0
win.Fence()
seen = []
for step in range(3):
    vals = np.zeros(size, np.int32)
    win.Lock(0)
    win.Accumulate([np.ones(1, np.int32), 1, MPI.INT], 0, [rank, 1, MPI.INT], MPI.SUM)
    win.Get([vals, 1, but_mine], 0, [0, 1, but_mine])
    win.Unlock(0)
    vals[rank] = step
    seen.append(int(vals.sum()))
seen = sorted(x for part in comm.allgather(seen) for x in part)
if rank == 0:
    print("counter", seen, flush=True)
comm.Barrier()
win.Lock(right)
before = np.zeros(size, np.int32)
win.Get_accumulate(np.full(size, 10, np.int32), [before, size, MPI.INT], right, (0, 1, every_other), MPI.SUM)
win.Unlock(right)
comm.Barrier()
win.Lock(rank)
mine = np.zeros(n, np.int32)
win.Get(mine, rank)
win.Unlock(rank)
print(rank, "get_accumulate", before.tolist(), mine.tolist(), flush=True)
comm.Barrier()
win.Free()
