"""Parallel matrix-vector product: Comm.Allgather with explicit datatypes
([x, MPI.DOUBLE], [xg, MPI.DOUBLE]).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Parallel matrix-vector product"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). The function `matvec` is copied as is; added: the
code below it that calls it on a small matrix (identical on every run) and
prints the result.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy

def matvec(comm, A, x):
    m = A.shape[0] # local rows
    p = comm.Get_size()
    xg = numpy.zeros(m*p, dtype='d')
    comm.Allgather([x,  MPI.DOUBLE],
                   [xg, MPI.DOUBLE])
    y = numpy.dot(A, xg)
    return y

# added for simdist's comparison: each rank holds 3 rows of the matrix
# A[i, j] = i + 2 j (exact small integers) and 3 entries of x = 0, 1, 2, ...
comm = MPI.COMM_WORLD
rank, p = comm.Get_rank(), comm.Get_size()
m = 3
rows = numpy.arange(rank * m, (rank + 1) * m, dtype='d')
A = rows[:, None] + 2 * numpy.arange(m * p, dtype='d')[None, :]
x = numpy.arange(rank * m, (rank + 1) * m, dtype='d')
y = matvec(comm, A, x)
print(f"rank {rank}: y={y.tolist()}")
