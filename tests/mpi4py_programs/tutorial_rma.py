"""One-sided communication (RMA): MPI.Win.Allocate, Win.Lock, Win.Put,
Win.Get, Win.Unlock, mpi4py.util.dtlib.to_numpy_dtype, Comm.Barrier.

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "One-Sided
Communication (RMA)", "Read from (write to) the entire RMA window"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 2

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

datatype = MPI.FLOAT
np_dtype = dtlib.to_numpy_dtype(datatype)
itemsize = datatype.Get_size()

N = 10
win_size = N * itemsize if rank == 0 else 0
win = MPI.Win.Allocate(win_size, comm=comm)

buf = np.empty(N, dtype=np_dtype)
if rank == 0:
    buf.fill(42)
    win.Lock(rank=0)
    win.Put(buf, target_rank=0)
    win.Unlock(rank=0)
    comm.Barrier()
else:
    comm.Barrier()
    win.Lock(rank=0)
    win.Get(buf, target_rank=0)
    win.Unlock(rank=0)
    assert np.all(buf == 42)

# added for simdist's comparison:
print(f"rank {rank}: {buf.dtype} {buf.tolist()}")
