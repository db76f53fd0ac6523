"""Sessions: MPI.Session.Init, Get_num_psets, Get_nth_pset,
Get_pset_info, Create_group, Finalize, MPI.SESSION_NULL, and
Intracomm.Create_from_group with string tags (the whole world, then the
odd ranks only).

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 1
# simdist-run: 4

import numpy as np
from mpi4py import MPI

s = MPI.Session.Init()
g = s.Create_group("mpi://WORLD")
comm = MPI.Intracomm.Create_from_group(g, "org.example.all")
print(comm.rank, comm.size, comm.allreduce(comm.rank + 1))
odd = g.Incl([r for r in range(g.size) if r % 2 == 1])
if g.rank % 2 == 1:
    sub = MPI.Intracomm.Create_from_group(odd, "org.example.odd")
    y = np.zeros(1)
    sub.Allreduce(np.array([float(g.rank)]), y)
    print(g.rank, "odd", sub.rank, sub.size, y[0])
    sub.Free()
names = [s.Get_nth_pset(i) for i in range(s.Get_num_psets())]
print(g.rank, names, [s.Get_pset_info(name).Get("mpi_size") for name in names[:2]])
g.Free()
comm.Free()
s.Finalize()
print(s == MPI.SESSION_NULL, bool(s))
