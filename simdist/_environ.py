"""Setting environment variables for a block, and putting them back after."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def patched(env: dict[str, str]):
    """``os.environ`` holds ``env`` while the block runs; afterwards each of
    its names has its old value again, or is unset if it had none."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def as_under_mpiexec(rank: int, size: int):
    """``patched`` with the variables Open MPI's ``mpiexec`` gives rank
    ``rank`` of ``size`` ranks on one host, which programs read to learn
    that they run under MPI, and as which rank (libEnsemble picks its MPI
    communications by them; others pick a GPU by the local rank). For a
    simulated rank: simdist itself does not take them for a launcher of its
    own ranks there (``simdist.mpi._spmd.launched``)."""
    from .mpi._spmd import driven

    driven()
    rank, size = str(rank), str(size)
    return patched({"OMPI_COMM_WORLD_SIZE": size, "OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_LOCAL_RANK": rank,
                    "OMPI_COMM_WORLD_LOCAL_SIZE": size, "OMPI_COMM_WORLD_NODE_RANK": rank})
