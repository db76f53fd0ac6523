# Calls: Datatype.Create_vector/Create_subarray/Create_indexed/Create_struct/
# Create_resized/Commit/Free, Sendrecv of columns (a halo exchange on a
# periodic ring), Recv into a type with holes, Status.Get_count/Get_elements,
# Gather into columns, Bcast with MPI.BOTTOM and Get_address, Alltoallw.
#
# Origin: this project.
#
# simdist-run: 3
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rows, cols = 3, 5

grid = np.zeros((rows, cols))
grid[:, 1:-1] = rank * 100 + np.arange(rows)[:, None] * 10 + np.arange(1, cols - 1)
column = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
flat = grid.reshape(-1)
right, left = (rank + 1) % size, (rank - 1) % size
comm.Sendrecv([flat[cols - 2:], 1, column], right, 0, [flat, 1, column], left, 0)
status = MPI.Status()
comm.Sendrecv([flat[1:], 1, column], left, 1, [flat[cols - 1:], 1, column], right, 1, status=status)
print(f"rank {rank} halo {grid.astype(int).tolist()} count {status.Get_count(column)} "
      f"elements {status.Get_elements(column)}")

holes = MPI.INT.Create_indexed([2, 1], [1, 4]).Commit()
if rank == 0:
    for dest in range(1, size):
        comm.Send(np.arange(dest * 10, dest * 10 + 3, dtype="i"), dest)
else:
    into = np.full(6, -1, "i")
    comm.Recv([into, 1, holes], 0, status=status)
    print(f"rank {rank} holes {into.tolist()} count {status.Get_count(holes)}")

one_column = column.Create_resized(0, 8).Commit()
table = np.full((rows, cols), -1.0)
comm.Gather(np.full(rows, float(rank)), [table, 1, one_column], 0)
if rank == 0:
    print(f"gathered {table.astype(int).tolist()}")

ints, reals = np.zeros(2, "i"), np.zeros(2)
where = MPI.Datatype.Create_struct([2, 2], [MPI.Get_address(ints), MPI.Get_address(reals)],
                                   [MPI.INT, MPI.DOUBLE]).Commit()
if rank == 0:
    ints[:], reals[:] = [7, 8], [0.25, 0.5]
comm.Bcast([MPI.BOTTOM, 1, where], 0)
print(f"rank {rank} bottom {ints.tolist()} {reals.tolist()}")

send = np.arange(size, dtype="i") + 10 * rank
recv = np.full((2, size), -1, "i")
comm.Alltoallw([send, [1] * size, [4 * j for j in range(size)], [MPI.INT] * size],
               [recv, [1] * size, [4 * j for j in range(size)], [MPI.INT] * size])
print(f"rank {rank} alltoallw {recv.tolist()}")

for datatype in (column, holes, one_column, where):
    datatype.Free()
