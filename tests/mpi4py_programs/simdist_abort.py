"""Comm.Abort with an exit code: rank 1 aborts with code 5 while rank 0
waits in a receive that never completes; the whole job ends with status 5.

Origin: written for this project. The lines printed before the Barrier are
flushed, so they are out before the abort.
"""
# simdist-run: 4 -> 5

import sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
print(f"rank {rank}: before the abort", flush=True)
sys.stdout.flush()
comm.Barrier()
if rank == 1:
    comm.Abort(5)
else:
    comm.recv(source=1, tag=99)  # never sent
print(f"rank {rank}: not reached", flush=True)
