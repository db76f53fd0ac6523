"""Scattering Python objects: Comm.scatter, Get_size.

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Scattering Python objects"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()

if rank == 0:
    data = [(i+1)**2 for i in range(size)]
else:
    data = None
data = comm.scatter(data, root=0)
assert data == (rank+1)**2

# added for simdist's comparison:
print(f"rank {rank}: data={data}")
