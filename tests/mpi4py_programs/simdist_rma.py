"""One-sided communication: Win.Create, Win.Allocate, Win.Allocate_shared
with Shared_query, Put, Get, Accumulate, Get_accumulate, Fetch_and_op,
Compare_and_swap, Rput/Rget, Fence, Lock/Unlock (exclusive and shared),
Lock_all/Unlock_all, Flush, Sync, Post/Start/Complete/Wait, the window
attributes and the errors of an access outside any epoch and out of range.

Origin: written for this project (mpi4py's tutorial has one example of
one-sided calls: tutorial_rma.py here).
"""
# simdist-run: 1
# simdist-run: 3
# simdist-run: 4

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size


def error_name(call):
    try:
        call()
        return "no error"
    except MPI.Exception as exc:
        return MPI.Get_error_string(exc.Get_error_class()).split(":")[0]


# Win.Create over the program's buffer, fence epochs
buf = np.full(size, -1, np.int64)
win = MPI.Win.Create(buf, 8, comm=comm)
print(rank, "create attrs", win.Get_attr(MPI.WIN_SIZE), win.Get_attr(MPI.WIN_DISP_UNIT),
      win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_CREATE, win.Get_attr(MPI.WIN_BASE) == buf.ctypes.data)
print(rank, "outside an epoch", error_name(lambda: win.Put(buf, rank)))
win.Fence()
for t in range(size):
    win.Put(np.array([10 * rank + t], np.int64), t, rank)
win.Fence()
print(rank, "after put", buf.tolist())
comm.Barrier()  # the print reads the window memory: no rank may change it before
got = np.zeros(size, np.int64)
win.Get(got, right)
win.Fence()
win.Accumulate(np.ones(size, np.int64), left, op=MPI.SUM)
win.Fence()
print(rank, "got", got.tolist(), "accumulated", buf.tolist())
print(rank, "out of range", error_name(lambda: win.Put(np.zeros(size + 1, np.int64), right)))
win.Fence(MPI.MODE_NOSUCCEED)
win.Free()
print(rank, "freed", win == MPI.WIN_NULL)

# Win.Allocate, passive target
win = MPI.Win.Allocate(8 * 2, 8, comm=comm)
mem = np.frombuffer(win.tomemory(), np.int64)
win.Lock(rank)
mem[:] = 0
win.Unlock(rank)
comm.Barrier()
ticket = np.zeros(1, np.int64)
win.Lock(0, MPI.LOCK_SHARED)
win.Fetch_and_op(np.ones(1, np.int64), ticket, 0, 0, MPI.SUM)
win.Unlock(0)
print(rank, "tickets", sorted(comm.allgather(int(ticket[0]))))
comm.Barrier()
win.Lock(0, MPI.LOCK_EXCLUSIVE)
old = np.zeros(1, np.int64)
win.Compare_and_swap(np.array([100 + rank], np.int64), np.array([size], np.int64), old, 0, 0)
win.Unlock(0)
swapped = comm.allgather(int(old[0]) == size)
print(rank, "one rank swapped", swapped.count(True))
comm.Barrier()
win.Lock_all()
seen = np.zeros(2, np.int64)
win.Rget(seen, 0).Wait()
win.Rput(np.array([rank], np.int64), right, 1).Wait()
win.Flush(right)
win.Unlock_all()
comm.Barrier()
win.Lock(rank)
print(rank, "winner is a rank", 100 <= seen[0] < 100 + size, "from the left", int(mem[1]) == left)
win.Unlock(rank)
comm.Barrier()
res = np.zeros(2, np.int64)
win.Fence()
win.Get_accumulate(np.array([5, 5], np.int64), res, right, op=MPI.MAX)
win.Fence()
print(rank, "get_accumulate max", [int(v) >= 0 for v in res], mem.tolist() == [max(5, int(mem[0])), 5])
win.Free()

# PSCW and Allocate_shared
win = MPI.Win.Allocate_shared(8 * (rank + 1), 8, comm=comm)
mine = np.frombuffer(win.tomemory(), np.int64)
mine[:] = -1
win.Sync()
comm.Barrier()
group = comm.Get_group()
win.Post(group.Incl([left]))
win.Start(group.Incl([right]))
win.Put(np.array([rank], np.int64), right, 0)
win.Complete()
win.Wait()
print(rank, "pscw", mine.tolist())
comm.Barrier()
for r in range(size):
    memory, unit = win.Shared_query(r)
    print(rank, "shared", r, len(memory), unit, np.frombuffer(memory, np.int64).tolist())
comm.Barrier()
win.Free()
