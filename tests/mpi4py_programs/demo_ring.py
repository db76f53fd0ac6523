#!/usr/bin/env python
# Calls: Comm.Sendrecv of 1,000,000 float64 around a ring (keyword arguments
# sendbuf, recvbuf, source, dest), Comm.Isend and Comm.Irecv completed with
# MPI.Request.Waitall.
#
# Origin: mpi4py's demo/profiling/ring.py, https://github.com/mpi4py/mpi4py,
# BSD 3-clause licence, Copyright (c) Lisandro Dalcin (see README.md here).
# Copied as is (the original sends zeros and prints nothing); added: a1 is
# filled with the rank before the exchange, and a print of what arrived.
#
# simdist-run: 4

if False:
    import mpi4py
    name = "name" # lib{name}.so
    path = []
    mpi4py.profile(name, path=path)

from mpi4py import MPI

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

src  = rank-1
dest = rank+1
if rank == 0:
    src = size-1
if rank == size-1:
    dest = 0

try:
    from numpy import zeros
    a1 = zeros(1000000, 'd')
    a2 = zeros(1000000, 'd')
except ImportError:
    from array import array
    a1 = array('d', [0]*1000); a1 *= 1000
    a2 = array('d', [0]*1000); a2 *= 1000

a1[:] = rank  # added for simdist's comparison

comm.Sendrecv(
    sendbuf=a1, recvbuf=a2,
    source=src, dest=dest,
)

print(f"rank {rank}: Sendrecv from {src}: min={a2.min()} max={a2.max()}")  # added
a2[:] = -1  # added

MPI.Request.Waitall([
    comm.Isend(a1, dest=dest),
    comm.Irecv(a2, source=src),
    ])

print(f"rank {rank}: Isend/Irecv from {src}: min={a2.min()} max={a2.max()}")  # added
