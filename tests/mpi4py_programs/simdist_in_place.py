"""MPI.IN_PLACE as the send buffer: Comm.Allreduce, Comm.Reduce (at the root),
Comm.Allgather, Comm.Gather (at the root), Comm.Scatter (receive buffer at the
root), Comm.Scan and Comm.Exscan.

Origin: written for this project (mpi4py's tutorial has no example of
IN_PLACE).
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

buf = np.array([rank, 10 * rank, 1], dtype='i')
comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
print(f"rank {rank}: Allreduce IN_PLACE {buf.tolist()}")

buf = np.array([rank + 1.0, -rank], dtype='d')
if rank == 0:
    comm.Reduce(MPI.IN_PLACE, buf, op=MPI.MAX, root=0)
    print(f"rank {rank}: Reduce IN_PLACE at root {buf.tolist()}")
else:
    comm.Reduce(buf, None, op=MPI.MAX, root=0)
    print(f"rank {rank}: Reduce sent {buf.tolist()}")

table = np.full((size, 2), -1, dtype='i')
table[rank] = [rank, rank * rank]
comm.Allgather(MPI.IN_PLACE, table)
print(f"rank {rank}: Allgather IN_PLACE {table.tolist()}")

root = size - 1
rows = np.full((size, 2), -1, dtype='i')
rows[rank] = [100 + rank, 200 + rank]
if rank == root:
    comm.Gather(MPI.IN_PLACE, rows, root=root)
    print(f"rank {rank}: Gather IN_PLACE at root {rows.tolist()}")
else:
    comm.Gather(rows[rank], None, root=root)

if rank == 0:
    chunks = np.arange(size * 2, dtype='d').reshape(size, 2)
    comm.Scatter(chunks, MPI.IN_PLACE, root=0)
    print(f"rank {rank}: Scatter IN_PLACE at root keeps {chunks[0].tolist()}")
else:
    mine = np.zeros(2, dtype='d')
    comm.Scatter(None, mine, root=0)
    print(f"rank {rank}: Scatter got {mine.tolist()}")

buf = np.array([rank + 1], dtype='i')
comm.Scan(MPI.IN_PLACE, buf, op=MPI.PROD)
print(f"rank {rank}: Scan IN_PLACE PROD {buf.tolist()}")

buf = np.array([rank + 1], dtype='i')
comm.Exscan(MPI.IN_PLACE, buf, op=MPI.SUM)
if rank > 0:
    print(f"rank {rank}: Exscan IN_PLACE SUM {buf.tolist()}")
