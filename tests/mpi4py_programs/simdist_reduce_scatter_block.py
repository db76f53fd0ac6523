"""Reduce, then scatter equal blocks: Comm.Reduce_scatter_block of int32
and float64 arrays with ops SUM, MAX and MIN, with explicit datatypes and
automatic ones, and with MPI.IN_PLACE.

Origin: written for this project (mpi4py's tutorial has no example of this
call). Every value is a small integer, so float sums are exact in any order.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
block = 3

send = (rank + 1) * np.arange(size * block, dtype='i')
recv = np.zeros(block, dtype='i')
comm.Reduce_scatter_block(send, recv, op=MPI.SUM)
print(f"rank {rank}: SUM int32 {recv.tolist()}")

comm.Reduce_scatter_block([send, MPI.INT], [recv, MPI.INT], op=MPI.MAX)
print(f"rank {rank}: MAX int32 {recv.tolist()}")

fsend = np.array([(rank * 7 + i) % 5 for i in range(size * block)], dtype='d')
frecv = np.zeros(block, dtype='d')
comm.Reduce_scatter_block(fsend, frecv, op=MPI.MIN)
print(f"rank {rank}: MIN float64 {frecv.tolist()}")
comm.Reduce_scatter_block(fsend, frecv)  # op defaults to SUM
print(f"rank {rank}: SUM float64 {frecv.tolist()}")

inplace = (rank + 1) * np.arange(size * block, dtype='i')
comm.Reduce_scatter_block(MPI.IN_PLACE, inplace, op=MPI.SUM)
print(f"rank {rank}: IN_PLACE SUM {inplace[:block].tolist()}")
