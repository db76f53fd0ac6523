"""Reduce-to-all of arrays: Comm.Allreduce (default op MPI.SUM).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "GPU-aware MPI + Python
GPU arrays", "Reduce-to-all CuPy arrays"), https://github.com/mpi4py/mpi4py,
BSD 3-clause licence, Copyright (c) Lisandro Dalcin (see README.md here).
Adapted: NumPy instead of CuPy (`cp` -> `np`), so the stream synchronisation
line, which only CuPy has, is dropped; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

sendbuf = np.arange(10, dtype='i')
recvbuf = np.empty_like(sendbuf)
comm.Allreduce(sendbuf, recvbuf)

assert np.allclose(recvbuf, sendbuf*size)

# added for simdist's comparison:
print(f"rank {rank}: {recvbuf.dtype} {recvbuf.tolist()}")
