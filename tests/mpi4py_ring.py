"""A ring allreduce written with mpi4py, as a user would write one, and its
factory for ``simdist check`` and the property suite
(tests/test_mpi4py_factory.py): ``mpi4py_ring:make``.

Reduce-scatter then allgather over the ring, ``N - 1`` steps each: at
step ``s`` rank ``r`` sends chunk ``r - s`` to its right neighbour and
folds the chunk ``r - s - 1`` it receives from its left one (``Sendrecv``);
then the reduced chunks go round (``Isend``, ``Recv``, ``Wait``). Chunks
travel as bytes, so every dtype of the contract goes through any MPI.

The module imports nothing of mpi4py: the tests' driver (the pytest
process) imports it to load the factory and must not start MPI itself
(tests/test_mpi4py_factory.py checks a module that does, in a child).
"""

from __future__ import annotations

import numpy as np

import simdist
from simdist._arguments import check_op
from simdist._reduction import divide_mean, fold


def ring_allreduce(comm, x, op="sum"):
    """The contract's allreduce of ``x`` over the mpi4py communicator ``comm``."""
    x = np.asarray(x)
    rank, size = comm.Get_rank(), comm.Get_size()
    check_op(op, x.dtype, rank, "allreduce")
    flat = np.array(x, copy=True).reshape(-1)  # never the caller's memory
    chunks = np.array_split(flat, size)  # views of flat
    right, left = (rank + 1) % size, (rank - 1) % size
    step_op = "sum" if op == "mean" else op
    for step in range(size - 1):  # reduce-scatter
        mine, theirs = chunks[(rank - step) % size], chunks[(rank - step - 1) % size]
        got = np.empty_like(theirs)
        comm.Sendrecv(_bytes(np.ascontiguousarray(mine)), dest=right, recvbuf=_bytes(got), source=left)
        fold(step_op, [theirs, got], theirs)
    for step in range(size - 1):  # allgather
        mine, theirs = chunks[(rank - step + 1) % size], chunks[(rank - step) % size]
        got = np.empty_like(theirs)
        request = comm.Isend(_bytes(np.ascontiguousarray(mine)), dest=right)
        comm.Recv(_bytes(got), source=left)
        request.Wait()
        theirs[...] = got
    if op == "mean":
        divide_mean(flat, size)
    return flat.reshape(x.shape)


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def make(base):
    """The factory: allreduce is the ring's, everything else the base's."""
    return simdist.Mpi4pyCommunicator(base, allreduce=ring_allreduce)
