"""Messages that move while their ranks wait in a blocking collective, as
MPI's progress rule has it: a big Issend still in flight when its sender
enters a Barrier; a big send whose request was freed before an Allreduce;
a posted Irecv of a big message carried through a Bcast by its receiver
while the sender waits in Wait; and the lowercase API of big pickles
around a barrier (mpi4py's test_util_pkl5 testBigMPI does the same).

Origin: written for this project.
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
dest, source = (rank + 1) % size, (rank - 1) % size
BIG = 1 << 20  # 4 MiB of int32: sent in pieces


def mine(tag):
    return np.full(BIG, rank * 100 + tag, dtype="i")


# 1. The receiver's Recv ends before the sender's Issend; the sender's
#    pieces go on moving inside the Barrier.
got = np.empty(BIG, "i")
request = comm.Issend(mine(1), dest, 1)
comm.Recv(got, source, 1)
comm.Barrier()
request.Wait()
print(f"rank {rank}: 1 issend across a barrier: {bool((got == source * 100 + 1).all())}")

# 2. A freed send request: the message still arrives whole.
got = np.empty(BIG, "i")
request = comm.Isend(mine(2), dest, 2)
request.Free()
comm.Recv(got, source, 2)
total = comm.allreduce(rank)
print(f"rank {rank}: 2 freed isend, then allreduce {total}: {bool((got == source * 100 + 2).all())}")

# 3. Odd ranks wait for their send before the collective, even ranks only
#    posted their receive: the even ranks carry it inside Bcast.
got = np.empty(BIG, "i")
receive = comm.Irecv(got, source, 3)
send = comm.Isend(mine(3), dest, 3)
if rank % 2:
    send.Wait()
root_value = comm.bcast(rank * 7 if rank == 0 else None, root=0)
MPI.Request.Waitall([receive, send])
print(f"rank {rank}: 3 irecv across a bcast of {root_value}: {bool((got == source * 100 + 3).all())}")

# 4. Big pickled objects: issend, matched probe, barrier, free.
message = (mine(4), mine(5))
request = comm.issend(message, dest, 4)
received = comm.mprobe(source, 4).irecv().wait()
comm.barrier()
request.wait()
print(f"rank {rank}: 4 pickles across a barrier: "
      f"{bool((received[0] == source * 100 + 4).all() and (received[1] == source * 100 + 5).all())}")
