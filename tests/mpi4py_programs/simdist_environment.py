"""The environment: mpi4py.rc, MPI.Is_initialized, MPI.Is_finalized,
MPI.Wtime, MPI.Wtick, MPI.Get_processor_name, MPI.Get_version,
MPI.Get_library_version, datatypes and their sizes (Datatype.Get_size,
.size), the constants ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED, IN_PLACE,
COMM_NULL, the ABI queries (Get_abi_version, Get_abi_info,
Get_abi_fortran_info: the sizes they give are those of the datatypes), and
MPI.Finalize.

Origin: written for this project. It prints facts that hold on any MPI
(and checks the values that depend on the library against their
definitions), not the values themselves.
"""
# simdist-run: 2

import socket
import mpi4py

print("rc:", {k: getattr(mpi4py.rc, k) for k in ("initialize", "threads", "thread_level", "finalize")})

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

print(f"rank {rank}: Is_initialized {MPI.Is_initialized()} Is_finalized {MPI.Is_finalized()}")
t0 = MPI.Wtime()
t1 = MPI.Wtime()
print(f"rank {rank}: Wtime is a float {isinstance(t0, float)}, does not go back {t1 >= t0}, "
      f"Wtick in (0, 1] {0 < MPI.Wtick() <= 1}")
print(f"rank {rank}: Get_processor_name is the host name {MPI.Get_processor_name() == socket.gethostname()}")
version = MPI.Get_version()
print(f"rank {rank}: Get_version is a pair of ints >= (3, 0): "
      f"{isinstance(version, tuple) and len(version) == 2 and version >= (3, 0)}")
library = MPI.Get_library_version()
print(f"rank {rank}: Get_library_version is a non-empty str {isinstance(library, str) and bool(library.strip())}")

for name in ("CHAR", "SIGNED_CHAR", "UNSIGNED_CHAR", "BYTE", "SHORT", "INT", "LONG", "LONG_LONG",
             "UNSIGNED", "FLOAT", "DOUBLE", "C_BOOL", "INT8_T", "INT16_T", "INT32_T", "INT64_T",
             "UINT8_T", "UINT64_T", "C_DOUBLE_COMPLEX"):
    dt = getattr(MPI, name)
    print(f"rank {rank}: MPI.{name} size {dt.Get_size()} {dt.size}")

print(f"rank {rank}: ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED are ints "
      f"{all(isinstance(c, int) for c in (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL, MPI.UNDEFINED))}, "
      f"distinct from ranks {min(MPI.ANY_SOURCE, MPI.PROC_NULL) < 0}")
print(f"rank {rank}: IN_PLACE is not None {MPI.IN_PLACE is not None}, COMM_NULL is falsy {not MPI.COMM_NULL}, "
      f"COMM_WORLD is truthy {bool(comm)}")

abi = MPI.Get_abi_info()
fortran = MPI.Get_abi_fortran_info()
sizes = {name: int(abi.Get(f"mpi_{name}_size")) == getattr(MPI, name.upper()).Get_size()
         for name in ("aint", "count", "offset")}
sizes.update({name: int(fortran.Get(f"mpi_{name}_size")) == getattr(MPI, name.upper()).Get_size()
              for name in ("logical", "integer", "real", "double_precision")})
print(f"rank {rank}: ABI version {MPI.Get_abi_version()} sizes agree {sizes} "
      f"supported: {[key for key, value in sorted(fortran.items()) if value == 'true']}")
abi.Free()
fortran.Free()

comm.Barrier()
MPI.Finalize()
print(f"rank {rank}: after Finalize: Is_finalized {MPI.Is_finalized()}")
