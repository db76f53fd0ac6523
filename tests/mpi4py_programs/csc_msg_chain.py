# Calls: Comm.Isend and Comm.Irecv of float64 arrays along a chain, with
# MPI.PROC_NULL at both ends, completed with MPI.Request.waitall.
#
# Origin: CSC - IT Center for Science, "Python in High Performance Computing"
# course, demos/mpi-msg-chain.py, https://github.com/csc-training/hpc-python,
# MIT licence, Copyright (c) 2019 CSC - IT Center for Science Ltd. (see
# README.md here). Copied as is.
#
# simdist-run: 4

# SPDX-FileCopyrightText: 2019 CSC - IT Center for Science Ltd. <www.csc.fi>
#
# SPDX-License-Identifier: MIT

from mpi4py import MPI
import numpy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()

data = numpy.arange(10, dtype=float) * (rank + 1)  # send buffer
buffer = numpy.zeros(10, dtype=float)              # receive buffer

tgt = rank + 1
src = rank - 1
if rank == 0:
    src = MPI.PROC_NULL
if rank == size - 1:
    tgt = MPI.PROC_NULL

req = []
req.append(comm.Isend(data, dest=tgt))
req.append(comm.Irecv(buffer, source=src))

MPI.Request.waitall(req)

print('[{0:2}] Received: {1}'.format(rank, buffer))
