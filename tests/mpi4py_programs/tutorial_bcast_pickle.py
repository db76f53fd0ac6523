"""Broadcasting a Python dictionary: Comm.bcast.

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Collective
Communication", "Broadcasting a Python dictionary"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 4

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    data = {'key1' : [7, 2.72, 2+3j],
            'key2' : ( 'abc', 'xyz')}
else:
    data = None
data = comm.bcast(data, root=0)

# added for simdist's comparison:
print(f"rank {rank}: data={data}")
