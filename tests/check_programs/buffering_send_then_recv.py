# ranks: 2
# checks: deadlock,buffering
# expect: buffering
"""The classic exchange: both ranks Send, then Recv. It passes at 1 KiB
under MPI's eager limit and hangs at 1 MiB (or on another MPI)."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out, into = np.full(128, comm.rank, dtype="f8"), np.empty(128)
comm.Send(out, dest=peer, tag=0)
comm.Recv(into, source=peer, tag=0)
assert into[0] == peer
