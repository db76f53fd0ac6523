"""MPI-IO: File.Open (collective, MODE_CREATE, MODE_DELETE_ON_CLOSE),
Write_at/Read_at with explicit offsets, Set_view with an etype (offsets
count etypes), the individual file pointer (Seek, Write, Read,
Get_position), Write_ordered and Read_ordered (rank order from the shared
file pointer), Write_shared (each rank's part whole, in some order),
Get_size, Get_byte_offset, Iwrite_at with a Status, views through
vector and indexed filetypes (Write_all, Read_all), and the errors of
Open (ERR_NO_SUCH_FILE, ERR_AMODE) and of a write to a read-only file.

Origin: written for this project. The file's name comes from rank 0
(tempfile) by bcast; what is printed does not depend on timing.
"""
# simdist-run: 3

import os
import tempfile

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
name = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
path = os.path.join(name, "data.bin")

fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
fh.Write_at(8 * rank, np.full(2, rank, dtype="i4"))           # bytes: rank r at 8 r
fh.Sync()
comm.Barrier()
everything = np.zeros(2 * size, dtype="i4")
fh.Read_at(0, everything)
print(f"rank {rank}: Write_at/Read_at {everything.tolist()} size {fh.Get_size()}")

fh.Set_view(4, MPI.INT)                                        # from byte 4, offsets in ints
fh.Seek(rank)
fh.Write(np.array([100 + rank], dtype="i4"))
position = fh.Get_position()
fh.Sync()
comm.Barrier()
mine = np.zeros(1, dtype="i4")
fh.Read_at(rank, mine)
print(f"rank {rank}: view write {mine.tolist()} position {position} byte offset {fh.Get_byte_offset(rank)}")

fh.Set_view(0, MPI.INT)
fh.Set_size(0)
fh.Write_ordered(np.arange(rank + 1, dtype="i4") + 10 * rank)  # rank order: 0 | 10 11 | 20 21 22
fh.Seek_shared(0)
back = np.zeros(rank + 1, dtype="i4")
fh.Read_ordered(back)
status = MPI.Status()
request = fh.Iwrite_at(100 + rank, np.ones(3, dtype="i4"))
request.Wait(status)
print(f"rank {rank}: ordered {back.tolist()} shared position {fh.Get_position_shared()} "
      f"Iwrite_at count {status.Get_count(MPI.INT)}")
comm.Barrier()
fh.Set_size(0)                                                 # (the shared pointer stays where it is)
fh.Seek_shared(0)
fh.Write_shared(np.full(4, rank + 1, dtype="i4"))              # whole parts, in some order
fh.Sync()
comm.Barrier()
parts = np.zeros(4 * size, dtype="i4")
fh.Read_at(0, parts)
blocks = sorted(parts.reshape(size, 4).tolist())
print(f"rank {rank}: shared parts {blocks}")

# Strided views: each rank owns the ints of its own column in rows of 2 * size
# ints, the even columns through a vector filetype, the odd ones through an
# indexed filetype whose first int is not at 0 (resized to the same extent).
comm.Barrier()
fh.Set_size(0)
evens = MPI.INT.Create_vector(3, 1, 2 * size).Create_resized(0, 6 * size * 4).Commit()
odd = MPI.INT.Create_indexed([1, 1, 1], [1, 1 + 2 * size, 1 + 4 * size])
odds = odd.Create_resized(0, evens.extent).Commit()
fh.Set_view(8 * rank, MPI.INT, evens)
fh.Write_all(np.arange(3, dtype="i4") + 10 * rank)
fh.Set_view(8 * rank, MPI.INT, odds)
fh.Write_all(np.arange(3, dtype="i4") + 10 * rank + 5)
fh.Sync()
comm.Barrier()
fh.Set_view(0, MPI.INT)
grid = np.zeros(6 * size, dtype="i4")
fh.Read_at(0, grid)
mine = np.zeros(3, dtype="i4")
fh.Set_view(8 * rank, MPI.INT, odds)
fh.Read_all(mine)
print(f"rank {rank}: strided views {grid.reshape(3, 2 * size).tolist()} odd column {mine.tolist()}")
for datatype in (evens, odd, odds):
    datatype.Free()
fh.Close()

for amode, what in ((MPI.MODE_RDONLY, "missing file"), (MPI.MODE_RDONLY | MPI.MODE_CREATE, "bad amode")):
    try:
        MPI.File.Open(comm, os.path.join(name, "missing.bin"), amode)
    except MPI.Exception as exc:
        print(f"rank {rank}: {what}: {exc.Get_error_class() in (MPI.ERR_NO_SUCH_FILE, MPI.ERR_AMODE)} "
              f"{MPI.Get_error_string(exc.Get_error_class()).split(':')[0]}")

ro = MPI.File.Open(comm, path, MPI.MODE_RDONLY | MPI.MODE_DELETE_ON_CLOSE)
try:
    ro.Write_at(0, np.zeros(1, dtype="i4"))
except MPI.Exception as exc:
    print(f"rank {rank}: write to a read-only file: {MPI.Get_error_string(exc.Get_error_class()).split(':')[0]}")
ro.Close()
comm.Barrier()
if rank == 0:
    print(f"deleted on close: {not os.path.exists(path)}")
    os.rmdir(name)
