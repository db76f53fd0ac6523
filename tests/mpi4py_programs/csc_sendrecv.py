# Calls: Comm.Sendrecv with keyword arguments (dest, sendtag, recvbuf,
# source, recvtag) and different tags in each direction.
#
# Origin: CSC - IT Center for Science, "Python in High Performance Computing"
# course, demos/mpi-sendrecv.py, https://github.com/csc-training/hpc-python,
# MIT licence, Copyright (c) 2019 CSC - IT Center for Science Ltd. (see
# README.md here). Copied as is (for 2 ranks only: on more, ranks 2 and up
# would print an uninitialised numpy.empty buffer).
#
# simdist-run: 2

from mpi4py import MPI
import numpy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

data = numpy.arange(10, dtype=float) * (rank + 1) # send buffer
buffer = numpy.empty(10, float)                   # receive buffer
if rank == 0:
    comm.Sendrecv(data, dest=1, sendtag=8,
                  recvbuf=buffer, source=1, recvtag=22)
elif rank == 1:
    comm.Sendrecv(data, dest=0, sendtag=22,
                  recvbuf=buffer, source=0, recvtag=8)

print("Rank %d: %s" % (rank, str(buffer)))
