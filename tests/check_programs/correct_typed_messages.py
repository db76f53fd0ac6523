# ranks: 2
# checks: misuse
# expect: none
"""Matching datatypes, a derived type against its basic elements, bytes received as MPI.BYTE, and every message received."""
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.Send([np.arange(4, dtype=np.int32), MPI.INT], dest=1, tag=0)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    comm.Send([np.arange(4.0), 2, pair], dest=1, tag=1)
    pair.Free()
    comm.Send(np.arange(3.0), dest=1, tag=2)
    comm.send({"a": 1}, dest=1, tag=3)
else:
    ints = np.zeros(4, np.int32)
    comm.Recv([ints, MPI.INT], source=0, tag=0)
    doubles = np.zeros(4)
    comm.Recv([doubles, MPI.DOUBLE], source=0, tag=1)
    raw = bytearray(24)
    comm.Recv([raw, MPI.BYTE], source=0, tag=2)
    assert comm.recv(source=0, tag=3) == {"a": 1}
