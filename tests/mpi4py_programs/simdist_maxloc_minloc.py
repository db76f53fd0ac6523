"""MPI.MAXLOC and MPI.MINLOC on Python objects ((value, index) pairs) with
Comm.allreduce, Comm.reduce and Comm.scan, including ties (MPI picks the
smallest index among equal values).

Origin: written for this project (mpi4py's tutorial has no example of these
ops).
"""
# simdist-run: 4

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

values = [3.5, 7.0, 7.0, -1.0][:size]
mine = (values[rank], rank)
print(f"rank {rank}: allreduce MAXLOC {comm.allreduce(mine, op=MPI.MAXLOC)}")
print(f"rank {rank}: allreduce MINLOC {comm.allreduce(mine, op=MPI.MINLOC)}")

ties = (42, rank)
print(f"rank {rank}: allreduce MAXLOC ties {comm.allreduce(ties, op=MPI.MAXLOC)}")
print(f"rank {rank}: allreduce MINLOC ties {comm.allreduce(ties, op=MPI.MINLOC)}")

reversed_index = (rank % 2, size - 1 - rank)
print(f"rank {rank}: reduce MAXLOC {comm.reduce(reversed_index, op=MPI.MAXLOC, root=0)}")
print(f"rank {rank}: reduce MINLOC {comm.reduce(reversed_index, op=MPI.MINLOC, root=size - 1)}")
print(f"rank {rank}: scan MINLOC {comm.scan((size - rank, rank), op=MPI.MINLOC)}")
