"""The simulated mpi4py's name service (``MPI.Publish_name``,
``Lookup_name``, ``Unpublish_name``) lasts as long as the run: a later run
on the same world, also after a rank was killed, and another world never
see a name, and nothing of it stays in the world's shared memory.
(tests/mpi4py_programs/simdist_name_service.py compares the calls with
Open MPI's behaviour.)
"""

from __future__ import annotations

import os

import pytest

import simdist
from fake_backends.mpi4py import installed


def _publish(comm, service, die=False):
    with installed(comm) as MPI:
        if comm.rank == 0:
            MPI.Publish_name(service, "port-of-" + service)
        MPI.COMM_WORLD.Barrier()
        seen = MPI.Lookup_name(service)
        if die and comm.rank == 1:
            os._exit(9)  # a rank killed while the name is published
        return seen


def _lookup(comm, service):
    with installed(comm) as MPI:
        try:
            return MPI.Lookup_name(service)
        except MPI.Exception as exc:
            return exc.Get_error_class() == MPI.ERR_NAME and "ERR_NAME"


def _table_bytes(comm):
    """How far the world's shared memory reaches past the simulator's arena."""
    arena = comm._arena
    return os.fstat(arena.fd).st_size - arena.layout.total


def test_a_published_name_is_seen_by_every_rank_and_ends_with_the_run():
    with simdist.World(2) as world:
        assert world.run(_publish, "a") == ["port-of-a", "port-of-a"]
        assert world.run(_table_bytes) == [0, 0]
        assert world.run(_lookup, "a") == ["ERR_NAME", "ERR_NAME"]
        with pytest.raises(simdist.RankDied):
            world.run(_publish, "b", die=True)
        assert world.run(_lookup, "b") == ["ERR_NAME", "ERR_NAME"]
        assert world.run(_publish, "c") == ["port-of-c", "port-of-c"]
    with simdist.World(2) as other:
        assert other.run(_lookup, "c") == ["ERR_NAME", "ERR_NAME"]
