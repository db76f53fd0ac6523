"""Every predefined reduction op on arrays: Comm.Allreduce and Comm.Reduce
with MPI.SUM, PROD, MIN, MAX on int32, int64 and float64; LAND, LOR, LXOR on
int32; BAND, BOR, BXOR on int32 and uint8; Comm.allreduce of Python objects
with SUM, PROD, MIN, MAX, LAND, LOR, LXOR, BAND, BOR, BXOR.

Origin: written for this project. Every float value is a small integer, so
sums and products are exact whatever the order of the reduction.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

ARITH = ("SUM", "PROD", "MIN", "MAX")
LOGIC = ("LAND", "LOR", "LXOR")
BITS = ("BAND", "BOR", "BXOR")

for dtype in ("i", "q", "d"):
    send = np.array([rank + 1, 3 - rank, -rank, 2], dtype=dtype)
    for name in ARITH:
        recv = np.zeros_like(send)
        comm.Allreduce(send, recv, op=getattr(MPI, name))
        print(f"rank {rank}: Allreduce {name} {recv.dtype} {recv.tolist()}")

flags = np.array([1, 0, rank % 2, rank == 0], dtype='i')
for name in LOGIC:
    recv = np.zeros_like(flags)
    comm.Allreduce(flags, recv, op=getattr(MPI, name))
    print(f"rank {rank}: Allreduce {name} {recv.tolist()}")

for dtype in ("i", "B"):
    bits = np.array([1 << rank, 0xF0 | rank, 0x0F], dtype=dtype)
    for name in BITS:
        recv = np.zeros_like(bits)
        comm.Allreduce(bits, recv, op=getattr(MPI, name))
        print(f"rank {rank}: Allreduce {name} {recv.dtype} {recv.tolist()}")

send = np.array([rank + 1.0, 2.0 * rank], dtype='d')
recv = np.zeros_like(send) if rank == 1 else None
comm.Reduce(send, recv, op=MPI.SUM, root=1)
print(f"rank {rank}: Reduce SUM at root 1 {None if recv is None else recv.tolist()}")

for name in ARITH + LOGIC + BITS:
    value = comm.allreduce(rank + 1, op=getattr(MPI, name))
    print(f"rank {rank}: allreduce {name} {value!r}")
print(f"rank {rank}: allreduce default {comm.allreduce(rank + 0.5)!r}")
print(f"rank {rank}: allreduce SUM of lists {comm.allreduce([rank], op=MPI.SUM)!r}")
