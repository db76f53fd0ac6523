"""Gathering Python objects: Comm.gather (None on the non-root ranks).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Gathering Python objects"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

data = (rank+1)**2
data = comm.gather(data, root=0)
if rank == 0:
    for i in range(size):
        assert data[i] == (i+1)**2
else:
    assert data is None

# added for simdist's comparison:
print(f"rank {rank}: data={data}")
