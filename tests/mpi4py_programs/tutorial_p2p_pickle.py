"""Point-to-point communication of Python objects: Comm.send, Comm.recv
(pickled, with a tag), COMM_WORLD, Get_rank.

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Point-to-Point
Communication", "Python objects (pickle under the hood)"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 2

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    data = {'a': 7, 'b': 3.14}
    comm.send(data, dest=1, tag=11)
elif rank == 1:
    data = comm.recv(source=0, tag=11)

# added for simdist's comparison:
print(f"rank {rank}: data={data}")
