"""Point-to-point communication of NumPy arrays: Comm.Send, Comm.Recv, with
the MPI datatype given explicitly ([data, MPI.INT]) and discovered
automatically (a bare float64 array).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Point-to-Point
Communication", "NumPy arrays (the fast way!)"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the prints (the tutorial
overwrites `data` with the second message, so the first is printed before).
"""
# simdist-run: 2

from mpi4py import MPI
import numpy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

# passing MPI datatypes explicitly
if rank == 0:
    data = numpy.arange(1000, dtype='i')
    comm.Send([data, MPI.INT], dest=1, tag=77)
elif rank == 1:
    data = numpy.empty(1000, dtype='i')
    comm.Recv([data, MPI.INT], source=0, tag=77)

# added for simdist's comparison:
print(f"rank {rank}: explicit {data.dtype} sum={data.sum()} first={data[:4]} last={data[-1]}")

# automatic MPI datatype discovery
if rank == 0:
    data = numpy.arange(100, dtype=numpy.float64)
    comm.Send(data, dest=1, tag=13)
elif rank == 1:
    data = numpy.empty(100, dtype=numpy.float64)
    comm.Recv(data, source=0, tag=13)

# added for simdist's comparison:
print(f"rank {rank}: automatic {data.dtype} sum={data.sum()} first={data[:4]} last={data[-1]}")
