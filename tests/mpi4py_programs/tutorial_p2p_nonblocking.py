"""Non-blocking point-to-point communication of Python objects: Comm.isend,
Comm.irecv, Request.wait (which returns the received object).

Origin: mpi4py's tutorial (docs/source/tutorial.rst, "Point-to-Point
Communication", "Python objects with non-blocking communication"),
https://github.com/mpi4py/mpi4py, BSD 3-clause licence, Copyright (c) Lisandro
Dalcin (see README.md here). Copied as is; added: the print at the end.
"""
# simdist-run: 2

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    data = {'a': 7, 'b': 3.14}
    req = comm.isend(data, dest=1, tag=11)
    req.wait()
elif rank == 1:
    req = comm.irecv(source=0, tag=11)
    data = req.wait()

# added for simdist's comparison:
print(f"rank {rank}: data={data}")
