"""Fault tolerance (MPI 5.0's ULFM) without failures: Comm.Is_revoked,
Get_failed, Ack_failed, Agree (the bitwise AND of the flags; an
intercommunicator's gives the remote group's), Iagree (nonblocking: a rank
that starts it goes on communicating before the others start theirs),
Shrink and Ishrink (a communicator of the same processes), on a duplicate of
COMM_WORLD, on COMM_SELF and on an intercommunicator.

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 1
# simdist-run: 3
# simdist-run: 4

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()


def local_calls(comm, name):
    failed = comm.Get_failed()
    print(f"rank {rank} {name}: revoked {comm.Is_revoked()}; failed {failed.Get_size()} "
          f"{MPI.Group.Compare(failed, MPI.GROUP_EMPTY) in (MPI.IDENT, MPI.CONGRUENT)}; "
          f"acked {comm.Ack_failed()} {comm.Ack_failed(0)} {comm.Ack_failed(comm.Get_size())}")
    failed.Free()


def agreements(comm, name, flag):
    print(f"rank {rank} {name}: Agree({flag:#06b}) = {comm.Agree(flag):#06b}")
    cell = np.array([flag], dtype=np.intc)
    request = comm.Iagree(cell)
    request.Wait()
    print(f"rank {rank} {name}: Iagree({flag:#06b}) = {cell[0]:#06b}, request null {request == MPI.REQUEST_NULL}")


def shrinks(comm, name):
    shrunk = comm.Shrink()
    print(f"rank {rank} {name}: Shrink is a {type(shrunk).__name__} of {shrunk.Get_size()}, rank "
          f"{shrunk.Get_rank()}, {'remote ' + str(shrunk.Get_remote_size()) if shrunk.Is_inter() else 'intra'}")
    shrunk.Free()
    shrunk, request = comm.Ishrink()
    request.Wait()
    total = shrunk.allreduce(rank)
    print(f"rank {rank} {name}: Ishrink is a {type(shrunk).__name__} of {shrunk.Get_size()}, rank "
          f"{shrunk.Get_rank()}, allreduce of world ranks {total}")
    shrunk.Free()


comm = world.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
for c, name in ((comm, "world dup"), (MPI.COMM_SELF, "self")):
    local_calls(c, name)
    agreements(c, name, 0b1111 ^ (1 << rank % 4))
    shrinks(c, name)

# Iagree does not wait for the others: rank 0 starts it, then sends the
# token that lets rank 1 start it, and so on along the ranks.
cell = np.array([0b111 << rank], dtype=np.intc)
if rank > 0:
    comm.recv(source=rank - 1, tag=7)
request = comm.Iagree(cell)
if rank + 1 < size:
    comm.send("go", dest=rank + 1, tag=7)
request.Wait()
print(f"rank {rank}: chained Iagree = {cell[0]:#b}")

if size > 1:
    low = rank < size // 2
    half = world.Split(0 if low else 1, rank)
    inter = half.Create_intercomm(0, world, size // 2 if low else 0)
    half.Free()
    local_calls(inter, "inter")
    agreements(inter, "inter", (0b0111 if low else 0b1110) & ~(1 << rank % 4 if rank == 1 else 0))
    shrinks(inter, "inter")
    inter.Free()
comm.Free()
