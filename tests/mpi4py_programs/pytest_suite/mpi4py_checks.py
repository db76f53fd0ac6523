"""A small pytest suite that uses mpi4py, as a project's own tests would.

Run by tests/test_mpi4py_programs.py under `mpiexec -n 2 python -m pytest`
and under `simdist run -n 2 -m pytest` (copied as test_mpi4py_checks.py into
a scratch directory: it is not part of simdist's own test suite). The last
test fails on rank 1 only, on purpose, to compare how a failure is reported.

Origin: written for this project.
"""

import numpy as np
import pytest
from mpi4py import MPI

comm = MPI.COMM_WORLD


def test_allreduce_sums_the_ranks():
    assert comm.allreduce(comm.rank) == sum(range(comm.size))


@pytest.mark.parametrize("dtype", ["i", "d"])
def test_Allreduce_of_arrays_with_MAX(dtype):
    out = np.empty(3, dtype)
    comm.Allreduce(np.full(3, comm.rank + 1, dtype), out, op=MPI.MAX)
    assert out.tolist() == [comm.size] * 3


def test_bcast_from_the_last_rank():
    value = comm.bcast({"from": comm.rank} if comm.rank == comm.size - 1 else None, root=comm.size - 1)
    assert value == {"from": comm.size - 1}


def test_sendrecv_around_the_ring():
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    assert comm.sendrecv(comm.rank, dest=right, source=left) == left


def test_fails_on_rank_1_only():
    assert comm.rank != 1, "rank 1 fails on purpose"
