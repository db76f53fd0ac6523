"""Scattering NumPy arrays: Comm.Scatter (sendbuf None on non-root ranks).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Scattering NumPy arrays"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

sendbuf = None
if rank == 0:
    sendbuf = np.empty([size, 100], dtype='i')
    sendbuf.T[:,:] = range(size)
recvbuf = np.empty(100, dtype='i')
comm.Scatter(sendbuf, recvbuf, root=0)
assert np.allclose(recvbuf, rank)

# added for simdist's comparison:
print(f"rank {rank}: {recvbuf.dtype} min={recvbuf.min()} max={recvbuf.max()} len={len(recvbuf)}")
