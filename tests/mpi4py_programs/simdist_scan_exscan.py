"""Prefix reductions: Comm.Scan and Comm.Exscan of arrays (ops SUM, PROD,
MAX), Comm.scan and Comm.exscan of Python objects (default op SUM, and
MPI.MAXLOC on (value, index) pairs).

Origin: written for this project (mpi4py's tutorial has no example of these
calls). Exscan leaves the receive buffer of rank 0 undefined in MPI, so
rank 0 does not print it; exscan of objects returns None on rank 0.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

send = np.array([rank + 1, 2 * rank + 1, 10 - rank], dtype='i')
for name, op in (("SUM", MPI.SUM), ("PROD", MPI.PROD), ("MAX", MPI.MAX)):
    recv = np.zeros_like(send)
    comm.Scan(send, recv, op=op)
    print(f"rank {rank}: Scan {name} {recv.tolist()}")
    recv = np.full_like(send, -99)
    comm.Exscan(send, recv, op=op)
    if rank == 0:
        print(f"rank {rank}: Exscan {name} (undefined on rank 0)")
    else:
        print(f"rank {rank}: Exscan {name} {recv.tolist()}")

x = np.array([0.5 * (rank + 1)], dtype='d')
y = np.zeros(1, dtype='d')
comm.Scan([x, MPI.DOUBLE], [y, MPI.DOUBLE], op=MPI.SUM)
print(f"rank {rank}: Scan float64 {y.tolist()}")

print(f"rank {rank}: scan {comm.scan(rank + 1)}")
print(f"rank {rank}: exscan {comm.exscan(rank + 1)}")
print(f"rank {rank}: scan list {comm.scan([rank])}")
print(f"rank {rank}: scan MAXLOC {comm.scan((rank % 2, rank), op=MPI.MAXLOC)}")
