# Calls: Comm.send of a list with a tag, Comm.recv with tag=MPI.ANY_TAG and a
# Status, Status.Get_tag, Status.Get_count (bytes of the pickled message),
# Status.Get_elements(MPI.INT).
#
# Origin: CSC - IT Center for Science, "Python in High Performance Computing"
# course, demos/mpi-status.py, https://github.com/csc-training/hpc-python,
# MIT licence, Copyright (c) 2019 CSC - IT Center for Science Ltd. (see
# README.md here). Copied as is.
#
# simdist-run: 2

from mpi4py import MPI
import numpy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    data = [1,3,5,7]
    comm.send(data, dest=1, tag=11)

if rank == 1:
    info = MPI.Status()  # prepare an instance of Status
    data = comm.recv(source=0, tag=MPI.ANY_TAG, status=info)

    print("Message tag was: %d" % info.Get_tag())
    print("Received %d bytes of data." % info.Get_count())

    print("Received %d integers." % info.Get_elements(MPI.INT))
