"""Dynamic windows: Win.Create_dynamic, Attach and Detach of several
regions, Put, Get, Accumulate, Get_accumulate, Fetch_and_op,
Compare_and_swap at absolute addresses (MPI.Get_address) in fence, lock,
Lock_all/Flush and PSCW epochs, a region detached and another attached in
its place, a local store made public by Lock/Unlock of the own rank, the
window attributes, and the errors of an address outside every region, a
region attached twice or overlapping another, a Detach of memory never
attached and an Attach to a window of another flavor.

Origin: written for this project.
"""
# simdist-run: 1
# simdist-run: 2
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


win = MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)
print(rank, "attrs", win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_DYNAMIC,
      win.Get_attr(MPI.WIN_MODEL) in (MPI.WIN_SEPARATE, MPI.WIN_UNIFIED), win.attrs, len(win.tomemory()),
      MPI.Get_address(win.tomemory()))
ints = np.arange(8, dtype=np.int64) + 100 * rank
doubles = np.zeros(4, np.float64)
win.Attach(ints)
win.Attach(doubles)
print(rank, "after attach", win.attrs)
where = comm.allgather((MPI.Get_address(ints), MPI.Get_address(doubles)))

# fence: every rank puts into its right neighbour's ints and reads its left's
win.Fence()
win.Put(np.array([rank], np.int64), right, where[right][0] + 8 * 7)
got = np.zeros(3, np.int64)
win.Get(got, left, (where[left][0] + 8, 3, MPI.INT64_T))
win.Fence()
print(rank, "fence", ints.tolist(), got.tolist())

# accumulates of every rank into rank 0's doubles fold in rank order
win.Fence()
win.Accumulate(np.full(4, 0.5 * (rank + 1)), 0, where[0][1], MPI.SUM)
win.Fence(MPI.MODE_NOSUCCEED)
total = comm.bcast(doubles.tolist() if rank == 0 else None)
print(rank, "accumulate", total)

# passive target: exclusive locks, fetch-and-op and compare-and-swap on rank 0's ints[0]
old = np.zeros(1, np.int64)
for _ in range(3):
    win.Lock(0, MPI.LOCK_EXCLUSIVE)
    win.Fetch_and_op(np.array([1], np.int64), old, 0, where[0][0], MPI.SUM)
    win.Unlock(0)
comm.Barrier()
win.Lock(0, MPI.LOCK_SHARED)
win.Get(got[:1], 0, where[0][0])
win.Unlock(0)
print(rank, "fetch_and_op", got[0] == 3 * size)
swapped = np.zeros(1, np.int64)
comm.Barrier()
win.Lock(right, MPI.LOCK_EXCLUSIVE)
win.Compare_and_swap(np.array([-5], np.int64), np.array([100 * right + 1], np.int64), swapped, right,
                     where[right][0] + 8)
win.Unlock(right)
fetched = np.zeros(2, np.int64)
win.Lock_all()
win.Get_accumulate(np.array([1, 1], np.int64), fetched, left, (where[left][0] + 16, 2), MPI.SUM)
win.Flush(left)
win.Unlock_all()
comm.Barrier()
win.Lock(rank)
print(rank, "passive", swapped.tolist(), fetched.tolist(), ints.tolist())
ints[6] = -rank  # a local store goes public at the Unlock of the own rank
win.Unlock(rank)
comm.Barrier()
win.Lock(right, MPI.LOCK_SHARED)
win.Get(got[:1], right, where[right][0] + 8 * 6)
win.Unlock(right)
print(rank, "local store", got[0])

# PSCW: each rank exposes to its left neighbour, accesses its right one
group = win.Get_group()
comm.Barrier()
win.Post(group.Incl([left]))
win.Start(group.Incl([right]))
win.Put(np.array([7.0 + rank], np.float64), right, where[right][1] + 8 * 3)
win.Complete()
win.Wait()
print(rank, "pscw", doubles.tolist())

# errors
win.Lock(right, MPI.LOCK_SHARED)
print(rank, "outside every region", error_name(lambda: win.Get(got[:1], right, 16)))
win.Unlock(right)
print(rank, "attached twice", error_name(lambda: win.Attach(ints)))
print(rank, "overlapping", error_name(lambda: win.Attach(ints[2:4])))
print(rank, "never attached", error_name(lambda: win.Detach(np.zeros(2))))
allocated = MPI.Win.Allocate(8, comm=comm)
print(rank, "attach to an Allocate window", error_name(lambda: allocated.Attach(np.zeros(2))))
allocated.Free()

# detach the doubles, attach a new region where the others can find it
comm.Barrier()
win.Detach(doubles)
more = np.full(3, 9, np.int32)
win.Attach(more)
where = comm.allgather(MPI.Get_address(more))
comm.Barrier()
win.Lock(right, MPI.LOCK_SHARED)
small = np.zeros(3, np.int32)
win.Get(small, right, where[right])
win.Unlock(right)
print(rank, "after reattach", small.tolist())
comm.Barrier()
win.Detach(more)
win.Detach(ints)
win.Free()
print(rank, "freed", win == MPI.WIN_NULL)
