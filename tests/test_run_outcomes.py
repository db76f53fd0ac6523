"""What ``World.run`` does at its edges, on both backends: runs from several
threads, return values the driver cannot rebuild, a rank that raises while
another dies, and arrays at numpy's limit of dimensions."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

import simdist
from simdist._arguments import MAX_DIMS

#: The simulator with its default slots, with slots that cut 1 MiB into chunks, and MPI.
WORLDS = {"sim": {}, "sim-small-slots": {"slot_bytes": 65536}, "mpi": {"backend": "mpi"}}


@pytest.fixture(scope="module", params=["sim", "sim-small-slots", pytest.param("mpi", marks=pytest.mark.slow)])
def world(request):
    if request.param == "mpi":
        from conftest import mpiexec_or_skip

        mpiexec_or_skip()
    with simdist.World(2, timeout=10.0, **WORLDS[request.param]) as w:
        yield w


def _sum_of_ranks_plus(comm, offset):
    return comm.allreduce(np.full(3, comm.rank + offset, np.int64)).tolist()


# -- threads -------------------------------------------------------------------------


def test_runs_from_several_threads_take_turns_and_each_gets_its_own_result(world):
    results, errors = {}, []

    def caller(offset):
        try:
            results[offset] = world.run(_sum_of_ranks_plus, offset)
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(offset,)) for offset in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60.0)
    assert not any(t.is_alive() for t in threads), "a run from a thread never returned"
    assert errors == []
    assert results == {k: [[2 * k + 1] * 3] * 2 for k in range(4)}


def test_run_from_inside_a_run_of_the_same_world_is_refused_at_once():
    import logging

    with simdist.World(2, timeout=10.0) as world:
        refused = []

        class Rerun(logging.Handler):
            def emit(self, record):
                try:
                    world.run(lambda comm: 0)
                except simdist.SimdistError as exc:
                    refused.append(str(exc))

        logger = logging.getLogger("simdist-test-rerun")
        logger.setLevel(logging.INFO)
        handler = Rerun()
        logger.addHandler(handler)
        try:
            world.run(lambda comm: logging.getLogger("simdist-test-rerun").info("hello"))
        finally:
            logger.removeHandler(handler)
        assert refused and all("inside a run of this world" in text for text in refused)
        assert world.run(_sum_of_ranks_plus, 0) == [[1] * 3] * 2


@pytest.mark.slow
def test_close_from_another_thread_waits_for_the_run_and_then_refuses_runs():
    with simdist.World(2, timeout=10.0) as world:
        started = threading.Event()
        outcome = {}

        def slow(comm):
            time.sleep(1.0)
            return comm.rank

        def caller():
            started.set()
            outcome["run"] = world.run(slow)

        t = threading.Thread(target=caller)
        t.start()
        started.wait()
        time.sleep(0.2)
        world.close()
        t.join(30.0)
        assert outcome == {"run": [0, 1]}
        with pytest.raises(simdist.SimdistError, match="closed"):
            world.run(slow)


# -- return values the driver cannot rebuild -------------------------------------------


class _BreaksInTheDriver:
    """Pickles on the rank; unpickling calls ``rebuild`` with ``arg``."""

    def __init__(self, rebuild, arg):
        self.rebuild, self.arg = rebuild, arg

    def __reduce__(self):
        return self.rebuild, (self.arg,)


def _fail_to_rebuild(message):
    raise ValueError(message)


@pytest.mark.parametrize("rebuild, arg, named", [(_fail_to_rebuild, "no way back", "ValueError: no way back"),
                                                 (sys.exit, 3, "SystemExit: 3")], ids=["ValueError", "SystemExit"])
def test_a_return_value_the_driver_cannot_unpickle_is_a_rank_error_naming_the_rank(world, rebuild, arg, named):
    with pytest.raises(simdist.RankError) as info:
        world.run(lambda comm: _BreaksInTheDriver(rebuild, arg) if comm.rank == 1 else comm.rank)
    assert list(info.value.failures) == [1]
    assert "rank 1 returned a value that the driver cannot unpickle" in info.value.failures[1]
    assert named in info.value.failures[1]
    assert world.run(_sum_of_ranks_plus, 0) == [[1] * 3] * 2


# -- a rank raises and another dies -----------------------------------------------------


def test_a_rank_that_raises_and_one_that_dies_in_the_grace_period_are_both_reported():
    def program(comm):
        if comm.rank == 0:
            raise KeyError("rank zero's own error")
        time.sleep(0.3)  # within the grace period after rank 0's failure
        os._exit(9)

    with simdist.World(2, timeout=10.0) as world:
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        error = info.value
        assert list(error.failures) == [0] and "rank zero's own error" in error.failures[0]
        assert error.died == {1: "exited with status 9"}
        assert "rank 1 exited with status 9 (the world has replaced it)" in str(error)
        assert error.aborted == []
        assert world.run(_sum_of_ranks_plus, 0) == [[1] * 3] * 2


# -- numpy's limit of dimensions --------------------------------------------------------


def _at_the_dimension_limit(comm):
    limit = (1,) * (MAX_DIMS - 1)
    x = np.arange(2.0).reshape(limit + (2,)) + comm.rank
    big = np.arange(2.0**17).reshape((1,) * (MAX_DIMS - 2) + (2, 2**16))  # chunked on small slots
    blocks = np.ones((comm.size,) + (1,) * (MAX_DIMS - 2) + (2,))
    results = {
        "allreduce": comm.allreduce(x),
        "mean": comm.allreduce(x, op="mean"),
        "reduce": comm.reduce(x, root=0),
        "broadcast": comm.broadcast(x, root=1),
        "large allreduce": comm.allreduce(big),
        "large broadcast": comm.broadcast(big, root=0),
        "reduce_scatter": comm.reduce_scatter(blocks),
        "alltoall": comm.alltoall(blocks),
        "scatter": comm.scatter(blocks, root=0),
        "allgather of one dimension fewer": comm.allgather(x[0]),
    }
    refused = {}
    for name, call in (("allgather", comm.allgather), ("gather", comm.gather)):
        try:
            call(x)
        except simdist.InvalidValue as exc:
            refused[name] = str(exc)
    return {k: (v.shape, v.tolist()) for k, v in results.items() if v is not None}, refused


def test_arrays_with_numpys_most_dimensions_are_carried_and_a_stack_beyond_it_is_refused(world):
    (results, refused), _ = world.run(_at_the_dimension_limit)
    limit = (1,) * (MAX_DIMS - 1)
    x = [np.arange(2.0).reshape(limit + (2,)) + r for r in range(2)]
    big = np.arange(2.0**17).reshape((1,) * (MAX_DIMS - 2) + (2, 2**16))
    expected = {
        "allreduce": x[0] + x[1],
        "mean": (x[0] + x[1]) / 2,
        "reduce": x[0] + x[1],
        "broadcast": x[1],
        "large allreduce": big + big,
        "large broadcast": big,
        "reduce_scatter": np.full((1,) * (MAX_DIMS - 2) + (2,), 2.0),
        "alltoall": np.ones((2,) + (1,) * (MAX_DIMS - 2) + (2,)),
        "scatter": np.ones((1,) * (MAX_DIMS - 2) + (2,)),
        "allgather of one dimension fewer": np.stack([x[0][0], x[1][0]]),
    }
    assert set(results) == set(expected)
    for name, want in expected.items():
        assert results[name] == (want.shape, want.tolist()), name
    for name in ("allgather", "gather"):
        assert f"rank 0: {name}: x has {MAX_DIMS} dimensions" in refused[name]
        assert f"at most {MAX_DIMS}" in refused[name]
