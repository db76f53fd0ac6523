"""Broadcasting a NumPy array: Comm.Bcast (buffer, datatype discovered).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Broadcasting a NumPy array"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    data = np.arange(100, dtype='i')
else:
    data = np.empty(100, dtype='i')
comm.Bcast(data, root=0)
for i in range(100):
    assert data[i] == i

# added for simdist's comparison:
print(f"rank {rank}: {data.dtype} sum={data.sum()} first={data[:5]}")
