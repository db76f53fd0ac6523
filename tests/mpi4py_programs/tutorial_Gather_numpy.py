"""Gathering NumPy arrays: Comm.Gather (recvbuf None on non-root ranks).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Gathering NumPy arrays"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

sendbuf = np.zeros(100, dtype='i') + rank
recvbuf = None
if rank == 0:
    recvbuf = np.empty([size, 100], dtype='i')
comm.Gather(sendbuf, recvbuf, root=0)
if rank == 0:
    for i in range(size):
        assert np.allclose(recvbuf[i,:], i)

# added for simdist's comparison:
if rank == 0:
    print(f"rank {rank}: shape={recvbuf.shape} row sums={recvbuf.sum(axis=1).tolist()}")
else:
    print(f"rank {rank}: recvbuf={recvbuf}")
