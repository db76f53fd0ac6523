# Calls: Comm.reduce of an int with op=MPI.MAX, Comm.Reduce of float64 arrays
# with op=MPI.SUM (recvbuf allocated on every rank).
#
# Origin: CSC - IT Center for Science, "Python in High Performance Computing"
# course, demos/mpi-reduce.py, https://github.com/csc-training/hpc-python,
# MIT licence, Copyright (c) 2019 CSC - IT Center for Science Ltd. (see
# README.md here). Copied as is (the message says "Sum of ranks" but the op is
# MPI.MAX, so it prints the largest rank).
#
# simdist-run: 4

from mpi4py import MPI
from numpy import arange, empty

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()

data = arange(size * 10, dtype=float) * (rank + 1)
buffer = empty(size * 10, float)

n = comm.reduce(rank, op=MPI.MAX, root=0)  # returns the value
comm.Reduce(data, buffer, op=MPI.SUM, root=0)  # in-place modification

if rank == 0:
    print("Sum of ranks: " + str(n))
    print("Received data:\n" + str(buffer))
