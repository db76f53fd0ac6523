"""Ranks, tags and roots as mpi4py's compiled calls convert a C int: an
int, or a number with __int__, truncated (a float rank 1.0 or 0.9; the
OSU multi-latency benchmark of mpi4py's demos passes nprocs / 2 as a
rank; Split's color and key, a bool too); a str or None raises TypeError.

Origin: written for this project, after mpi4py's demo/osu_multi_lat.py.
"""
# simdist-run: 1
# simdist-run: 2

import numpy as np
from mpi4py import MPI

c = MPI.COMM_WORLD
r = np.zeros(1)
req = c.Irecv(r, c.rank * 1.0, 1.0)
c.Send(np.ones(1), float(c.rank), 1)
req.Wait()
print(c.rank, "float rank and tag", r)
req = c.Irecv(r, c.rank + 0.5, 1)
c.Send(np.full(1, 2.0), c.rank + 0.9, 1)
req.Wait()
print(c.rank, "truncated", r)
print(c.rank, c.bcast(5, root=0.0), c.Split(0, 0).Get_size(), c.reduce(1, root=np.float32(0)))
pairs = c.size / 2
if c.size == 2:
    partner = c.rank + pairs if c.rank < pairs else c.rank - pairs
    got = c.sendrecv(c.rank, dest=partner, source=partner)
    print(c.rank, "partner", partner, "sent", got)
for bad in ("0", None):
    try:
        c.Send(np.ones(1), bad, 1)
        print(c.rank, repr(bad), "accepted")
    except Exception as e:
        print(c.rank, repr(bad), type(e).__name__)
    try:
        c.bcast(1, root=bad)
        print(c.rank, repr(bad), "accepted")
    except Exception as e:
        print(c.rank, repr(bad), type(e).__name__)
for color, key in ((c.rank < 1, False), (1.0, -c.rank - 0.5), (np.int64(2), np.int32(0))):
    part = c.Split(color, key)  # a distributed-array library splits by rank < half
    print(c.rank, "Split", repr(color), repr(key), part.Get_size(), part.Get_rank())
    part.Free()
for bad in ("0", None):
    try:
        c.Split(bad)
        print(c.rank, "Split", repr(bad), "accepted")
    except Exception as e:
        print(c.rank, "Split", repr(bad), type(e).__name__)
try:
    c.Irecv(r, c.size + True, 1)
except MPI.Exception as e:
    print(c.rank, "bool rank past the end", MPI.Get_error_string(e.Get_error_class()).split(":")[0])
