"""Failure semantics of a World (DESIGN.md, "Worlds: the driver and its ranks").

Each kind of failure raises its own SimdistError with a message that names
the ranks and the calls, never hangs the driver, and leaves the world usable:
every test ends with a correct allreduce on the same world.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import simdist

MISMATCH_TIMEOUT = 30.0  # mismatches must be detected in well under this


def assert_usable(world: simdist.World) -> None:
    """The world runs a correct allreduce: every rank contributes rank + 1."""
    results = world.run(lambda comm: comm.allreduce(np.full(3, comm.rank + 1, np.int64)))
    expected = world.size * (world.size + 1) // 2
    assert len(results) == world.size
    for got in results:
        np.testing.assert_array_equal(got, np.full(3, expected, np.int64))


@pytest.fixture(scope="module")
def world3():
    """A 3-rank world shared by the tests whose failures replace no worker."""
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        yield world


@pytest.fixture(scope="module")
def world2():
    with simdist.World(2, timeout=MISMATCH_TIMEOUT) as world:
        yield world


# -- a rank raises ----------------------------------------------------------------


class MarkedError(Exception):
    pass


class UnpicklableError(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled back to the driver


def test_rank_error_carries_the_traceback_and_lists_aborted_ranks(world3):
    def program(comm):
        if comm.rank == 1:
            raise MarkedError("boom-from-rank-1")
        comm.barrier()

    with pytest.raises(simdist.RankError) as info:
        world3.run(program)
    err = info.value
    assert sorted(err.failures) == [1]
    assert "MarkedError: boom-from-rank-1" in err.failures[1]
    assert 'raise MarkedError("boom-from-rank-1")' in err.failures[1]  # the user's source line
    assert err.aborted == [0, 2]
    assert isinstance(err.exceptions[1], MarkedError)
    assert err.exceptions[1].args == ("boom-from-rank-1",)
    message = str(err)
    assert message.startswith("rank 1 raised test_failures.MarkedError: boom-from-rank-1\n")
    assert "--- rank 1 ---" in message
    assert "boom-from-rank-1" in message
    assert "[0, 2]" in message and "interrupted" in message
    assert_usable(world3)


def test_rank_error_reports_every_failed_rank(world3):
    def program(comm):
        if comm.rank != 1:
            raise MarkedError(f"failure-of-rank-{comm.rank}")
        comm.barrier()

    with pytest.raises(simdist.RankError) as info:
        world3.run(program)
    err = info.value
    assert sorted(err.failures) == [0, 2]
    for rank in (0, 2):
        assert f"failure-of-rank-{rank}" in err.failures[rank]
        assert f"--- rank {rank} ---" in str(err)
    assert err.aborted == [1]
    assert_usable(world3)


@pytest.mark.slow
def test_rank_error_is_raised_while_a_peer_keeps_computing(procs):
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        before = world.pids

        def program(comm):
            if comm.rank == 1:
                raise MarkedError("failed-while-rank-0-computes")
            if comm.rank == 0:
                time.sleep(600)  # never calls the communicator again
            comm.barrier()

        started = time.monotonic()
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        assert time.monotonic() - started < MISMATCH_TIMEOUT / 2
        assert sorted(info.value.failures) == [1]
        assert "failed-while-rank-0-computes" in info.value.failures[1]
        assert world.pids[0] != before[0]  # the computing rank was stopped and replaced
        assert procs.wait_gone([before[0]]) == []
        assert_usable(world)


def test_rank_error_keeps_the_traceback_of_an_unpicklable_exception(world3):
    def program(comm):
        if comm.rank == 0:
            raise UnpicklableError("holds-a-lock")
        return comm.rank

    with pytest.raises(simdist.RankError) as info:
        world3.run(program)
    err = info.value
    assert sorted(err.failures) == [0]
    assert "UnpicklableError: holds-a-lock" in err.failures[0]
    assert err.exceptions.get(0) is None
    assert_usable(world3)


# -- calls that do not match --------------------------------------------------------

MISMATCHES = {
    # name: (program, fragments the message must contain)
    "kind": (
        lambda c: c.barrier() if c.rank == 0 else c.allreduce(np.ones(3)),
        ["rank 0 called barrier #1", "allreduce #1 (float64 (3,), op=sum)", "same collectives"],
    ),
    "dtype": (
        lambda c: c.allreduce(np.ones(3, np.float32 if c.rank == 2 else np.float64)),
        ["rank 0 called allreduce #1 (float64 (3,)", "rank 2 called allreduce #1 (float32 (3,)", "dtype"],
    ),
    "shape": (
        lambda c: c.allgather(np.ones(4 if c.rank == 1 else 3)),
        ["rank 0 called allgather #1 (float64 (3,))", "rank 1 called allgather #1 (float64 (4,))", "shape"],
    ),
    "op": (
        lambda c: c.allreduce(np.ones(3), op="max" if c.rank == 2 else "sum"),
        ["rank 0 called allreduce #1 (float64 (3,), op=sum)", "rank 2 called allreduce #1 (float64 (3,), op=max)", "op"],
    ),
    "root": (
        lambda c: c.reduce(np.ones(3), root=1 if c.rank == 2 else 0),
        ["rank 0 called reduce #1", "root=0", "rank 2 called reduce #1", "root=1", "root"],
    ),
    "broadcast root": (
        lambda c: c.broadcast(np.ones(3), root=c.rank),
        ["broadcast #1", "root=0", "root=1", "same root"],
    ),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_mismatched_calls_raise_collective_mismatch_promptly(world3, name):
    program, fragments = MISMATCHES[name]
    started = time.monotonic()
    with pytest.raises(simdist.CollectiveMismatch) as info:
        world3.run(program)
    assert time.monotonic() - started < MISMATCH_TIMEOUT / 2
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert len(info.value.calls) == 2  # both calls, by rank
    assert_usable(world3)


def test_rank_returning_while_peers_wait_is_a_mismatch(world3):
    def program(comm):
        if comm.rank == 0:
            return "left early"
        return comm.allreduce(np.ones(2, np.float32))

    started = time.monotonic()
    with pytest.raises(simdist.CollectiveMismatch) as info:
        world3.run(program)
    assert time.monotonic() - started < MISMATCH_TIMEOUT / 2
    message = str(info.value)
    assert "rank 0 has returned" in message
    assert "waits in allreduce #1 (float32 (2,), op=sum)" in message
    assert info.value.calls[0] == "returned"
    assert_usable(world3)


def test_a_mismatch_names_the_line_of_each_rank_that_made_the_call(world3):
    def program(comm):
        if comm.rank == 2:
            return comm.allreduce(np.ones(3, np.float32))  # the odd one out
        return comm.allreduce(np.ones(2, np.float32))

    with pytest.raises(simdist.CollectiveMismatch) as info:
        world3.run(program)
    first = program.__code__.co_firstlineno
    message = str(info.value)
    assert f"rank 0 of the run called it at test_failures.py:{first + 3}: return comm.allreduce(np.ones(2, np.float32))" in message
    assert f"rank 2 of the run called it at test_failures.py:{first + 2}: return comm.allreduce(np.ones(3, np.float32))" in message


def test_ranks_may_catch_a_mismatch_and_continue(world3):
    def program(comm):
        try:
            comm.allreduce(np.ones(2, np.float32 if comm.rank == 1 else np.float64))
        except simdist.CollectiveMismatch as exc:
            caught = str(exc)
        else:
            caught = None
        return caught, comm.allreduce(np.full(2, comm.rank + 1.0))

    results = world3.run(program)
    for caught, total in results:
        assert caught is not None and "float32" in caught
        np.testing.assert_array_equal(total, np.full(2, 6.0))
    assert_usable(world3)


def test_a_one_phase_call_against_a_chunked_one_raises_on_every_rank(world3):
    # The allreduce looks for each member's call epoch; a gather must store it too.
    def program(comm):
        try:
            comm.allreduce(np.ones(3)) if comm.rank == 0 else comm.gather(np.ones(3))
        except simdist.CollectiveMismatch as exc:
            caught = str(exc)
        else:
            caught = None
        return caught, comm.allreduce(np.full(2, comm.rank + 1.0))

    for caught, total in world3.run(program):
        assert caught is not None and "allreduce #1" in caught and "gather #1" in caught, caught
        np.testing.assert_array_equal(total, np.full(2, 6.0))
    assert_usable(world3)


def test_ranks_may_catch_invalid_arguments_and_continue(world3):
    def program(comm):
        try:
            comm.allreduce(np.ones(2, np.int32), op="mean")
        except TypeError as exc:  # InvalidType is a TypeError
            caught = type(exc).__name__
        return caught, comm.allreduce(np.float64(comm.rank))

    assert world3.run(program) == [("InvalidType", 3.0)] * 3


# -- no progress: timeouts ------------------------------------------------------------


def test_hang_watch_reports_only_when_a_rank_waits_and_no_rank_moved_for_the_timeout():
    from simdist._driver import HangWatch

    waiting = [True, False]
    watch = HangWatch(timeout=0.0)
    assert watch.hung([("call", 1), ("user", 0)], waiting) is None  # the first look: every rank moved
    assert watch.hung([("call", 2), ("user", 0)], waiting) is None  # rank 0 moved
    waited = watch.hung([("call", 2), ("user", 0)], waiting)
    assert waited is not None and sorted(waited) == [0, 1]
    assert waited[0] >= 0 and waited[1] is None  # only a waiting rank has waited
    assert watch.hung([("user", 3), ("user", 0)], [False, False]) is None  # moved again
    assert watch.hung([("user", 3), ("user", 0)], [False, False]) is None  # nobody waits: computing is no hang
    patient = HangWatch(timeout=60.0)
    patient.hung([("call", 1)], [True])
    assert patient.hung([("call", 1)], [True]) is None  # not for long enough


def test_whereabouts_sentences_are_the_same_for_every_backend():
    from simdist import _whereabouts as wa

    assert wa.describe(wa.CALL, 2, "allreduce #3 (float32 (4,), op=sum)", 1.5, 1) == (
        "waiting in allreduce #3 (float32 (4,), op=sum) for 1.5 s, on rank 1")
    assert wa.describe(wa.CALL, 2, "barrier #1") == "waiting in barrier #1"
    assert wa.describe(wa.USER, 2) == "running user code (2 calls completed)"
    assert wa.describe(wa.RETURNED, 5) == "returned from the function (5 calls completed)"
    assert wa.describe(wa.RETURNED, None) == "returned from the function"  # a count not known is not made up
    assert wa.describe(wa.FAILED, 5) == "raised an exception"
    assert wa.describe(wa.IDLE, 0) == "idle"



@pytest.mark.slow
def test_rank_stuck_in_user_code_times_out_with_a_report(procs):
    with simdist.World(3, timeout=1.0) as world:
        before = world.pids

        def program(comm):
            comm.allreduce(np.ones(2))
            if comm.rank == 1:
                time.sleep(600)
            comm.allreduce(np.ones(2))

        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        assert time.monotonic() - started < 30
        err = info.value
        assert err.timeout == 1.0
        assert sorted(err.report) == [0, 1, 2]
        assert "running user code" in err.report[1]
        assert "1 calls completed" in err.report[1]
        for rank in (0, 2):
            assert "waiting in allreduce #2 (float64 (2,), op=sum) on the world" in err.report[rank]
            assert "on rank 1" in err.report[rank]
        message = str(err)
        assert "no progress for 1 s" in message
        assert "rank 1: running user code" in message
        assert "rank 0: waiting in allreduce #2" in message
        # the stuck worker was replaced, the others kept
        after = world.pids
        assert after[1] != before[1] and after[0] == before[0] and after[2] == before[2]
        assert procs.wait_gone([before[1]]) == []
        assert_usable(world)


def test_recv_deadlock_times_out_and_the_report_names_the_recv():
    with simdist.World(2, timeout=1.0) as world:

        def program(comm):
            other = 1 - comm.rank
            comm.send(np.ones(2), dest=other, tag=3)  # small: buffered, returns
            return comm.recv(other, tag=7)  # nobody sends tag 7

        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        report = info.value.report
        assert "waiting in recv #2 from rank 1 (tag=7)" in report[0]
        assert "waiting in recv #2 from rank 0 (tag=7)" in report[1]
        assert "recv #2 from rank 1" in str(info.value)
        assert_usable(world)


@pytest.mark.slow
def test_deadlock_across_communicators_reports_each_call_and_communicator():
    with simdist.World(3, timeout=1.0) as world:

        def program(comm):
            sub = comm.split(0 if comm.rank < 2 else 1)
            if comm.rank == 1:
                sub.allreduce(np.ones(4, np.int32))  # waits for rank 0 in the sub-communicator
            else:
                comm.barrier()  # waits for rank 1 in the world

        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        report = info.value.report
        assert "waiting in barrier #2 on the world" in report[0]
        assert "waiting in barrier #2 on the world" in report[2]
        assert "waiting in allreduce #1 (int32 (4,), op=sum) on a sub-communicator" in report[1]
        assert_usable(world)


@pytest.mark.slow
def test_ranks_computing_without_waiting_are_never_timed_out():
    with simdist.World(2, timeout=0.5) as world:

        def program(comm):
            _compute(1.2)  # longer than the timeout, but no rank waits
            return comm.allreduce(np.float64(comm.rank + 1))

        assert world.run(program) == [3.0, 3.0]


def _all_wait_outside_mpi(comm, how: str):
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if how == "sleep":
        time.sleep(600)
    while not world.Iprobe(source=MPI.ANY_SOURCE, tag=3):  # an event loop: none will send
        time.sleep(0.01)


@pytest.mark.parametrize("how", ["sleep", "poll"])
def test_ranks_that_all_wait_outside_mpi_are_a_hang(how):
    """No rank in a call, none returned, none computing: they wait for
    each other outside MPI, and the run ends at the timeout."""
    with simdist.World(2, timeout=0.5) as world:
        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(_all_wait_outside_mpi, how)
        assert time.monotonic() - started < 30
        assert all("running user code" in info.value.report[r] for r in (0, 1))
        assert_usable(world)


def _compute(seconds: float) -> None:
    """Use a CPU for ``seconds``, as a rank's own computation does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


def test_ranks_waiting_for_a_peer_that_computes_longer_than_the_timeout_wait_on():
    with simdist.World(2, timeout=0.2) as world:

        def program(comm):
            if comm.rank == 0:
                _compute(1.0)  # five timeouts; rank 1 waits in the allreduce, as under mpiexec
            return comm.allreduce(np.float64(comm.rank + 1))

        assert world.run(program) == [3.0, 3.0]


def test_a_rank_that_computes_and_then_blocks_outside_any_call_is_reported():
    with simdist.World(2, timeout=0.5) as world:

        def program(comm):
            if comm.rank == 0:
                _compute(1.0)
                time.sleep(600)  # blocked, using no CPU: the hang the timeout is for
            comm.barrier()

        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        assert 1.0 < time.monotonic() - started < 30
        assert "running user code" in info.value.report[0]
        assert "waiting in barrier #1" in info.value.report[1]
        assert_usable(world)



def _poll_for_what_never_comes(comm, poll: str):
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if world.rank == 1:
        return world.recv(source=0, tag=8)  # rank 0 never sends it
    if poll == "Iprobe":
        while not world.Iprobe(source=1, tag=5):
            pass
    else:
        request = world.irecv(source=1, tag=5)
        while not request.Test():
            pass


@pytest.mark.parametrize("poll", ["Iprobe", "Test"])
def test_a_rank_that_polls_in_a_loop_while_its_peer_waits_for_it_is_reported(poll):
    """A loop of non-blocking polls uses a CPU, yet it waits, here for a
    message from a peer that waits for it in turn: not computing."""
    with simdist.World(2, timeout=0.5) as world:
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(_poll_for_what_never_comes, poll)
        assert "running user code" in info.value.report[0]
        assert "waiting in recv(source=0, tag=8)" in info.value.report[1]
        assert_usable(world)

# -- a worker dies ------------------------------------------------------------------------


def test_worker_killed_by_a_signal_raises_rank_died(procs):
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        before = world.pids

        def program(comm):
            if comm.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            comm.barrier()

        with pytest.raises(simdist.RankDied) as info:
            world.run(program)
        assert info.value.ranks == {1: "was killed by SIGKILL"}
        assert "rank 1 was killed by SIGKILL" in str(info.value)
        assert world.pids[1] != before[1]
        assert procs.wait_gone([before[1]]) == []
        assert_usable(world)


def test_worker_calling_os_exit_raises_rank_died(procs):
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        before = world.pids

        def program(comm):
            if comm.rank == 2:
                os._exit(3)
            comm.allreduce(np.ones(2))

        with pytest.raises(simdist.RankDied) as info:
            world.run(program)
        assert info.value.ranks == {2: "exited with status 3"}
        assert "rank 2 exited with status 3" in str(info.value)
        assert world.pids[2] != before[2] and world.pids[:2] == before[:2]
        assert procs.wait_gone([before[2]]) == []
        assert_usable(world)


def test_worker_killed_mid_collective_from_outside(procs):
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        before = world.pids

        def program(comm, victim):
            if comm.rank == 0:  # kill rank 1 while every rank streams large allreduces
                threading.Timer(0.3, os.kill, (victim, signal.SIGKILL)).start()
            x = np.ones(1 << 20, np.float32)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                comm.allreduce(x)

        with pytest.raises(simdist.RankDied) as info:
            world.run(program, before[1])
        assert info.value.ranks == {1: "was killed by SIGKILL"}
        assert procs.wait_gone([before[1]]) == []
        assert_usable(world)
    assert procs.wait_gone(before + world.pids) == []


@pytest.mark.slow
def test_workers_killed_between_runs_never_break_the_world(procs):
    """Kill a worker while no run is active, then run at once: the run either
    reports the death (RankDied) or replaces the worker quietly; either way
    the world stays in step. Repeated, since the kill races with the run."""
    with simdist.World(3, timeout=MISMATCH_TIMEOUT) as world:
        for _ in range(40):
            victim = world.pids[1]
            os.kill(victim, signal.SIGKILL)
            assert procs.wait_gone([victim]) == []
            try:
                assert world.run(lambda comm: comm.rank) == [0, 1, 2]
            except simdist.RankDied as exc:
                assert exc.ranks == {1: "was killed by SIGKILL"}
            assert_usable(world)


# -- bad arguments ----------------------------------------------------------------------

F32 = np.ones(2, np.float32)
InvalidType, InvalidValue = simdist.InvalidType, simdist.InvalidValue

BAD_CALLS = [
    # (id, program, error type, message fragment); every rank makes the call
    ("object dtype", lambda c: c.allreduce(np.array([object(), 1], dtype=object)), InvalidType, "allreduce: x has dtype object"),
    ("str dtype", lambda c: c.allreduce(np.array(["a", "b"])), InvalidType, "dtype <U1"),
    ("python str", lambda c: c.allgather("ab"), InvalidType, "allgather: x has dtype <U2"),
    ("structured dtype", lambda c: c.broadcast(np.zeros(2, [("a", "i4"), ("b", "f8")])), InvalidType, "which collectives do not carry"),
    ("big-endian", lambda c: c.allreduce(np.ones(2, ">f4")), InvalidType, "newbyteorder"),
    ("big-endian send", lambda c: c.send(np.ones(2, ">i8"), dest=1 - c.rank), InvalidType, "send: x has dtype >i8"),
    ("None", lambda c: c.allreduce(None), InvalidType, "allreduce: x=None"),
    ("op name", lambda c: c.allreduce(F32, op="add"), InvalidValue, "op='add' is not a reduction op"),
    ("op case", lambda c: c.reduce(F32, op="SUM"), InvalidValue, "reduce: op='SUM' is not a reduction op"),
    ("op None", lambda c: c.allreduce(F32, op=None), InvalidType, "allreduce: op=None must be a str"),
    ("op list", lambda c: c.allreduce(F32, op=["sum"]), InvalidType, "allreduce: op=['sum'] must be a str"),
    ("op int", lambda c: c.reduce_scatter(np.ones((2, 2)), op=1), InvalidType, "reduce_scatter: op=1 must be a str"),
    ("mean on int", lambda c: c.allreduce(np.ones(2, np.int32), op="mean"), InvalidType, "op='mean' is not defined on dtype int32"),
    ("sum on bool", lambda c: c.allreduce(np.ones(2, bool), op="sum"), InvalidType, "op='sum' is not defined on dtype bool"),
    ("min on complex", lambda c: c.allreduce(np.ones(2, np.complex64), op="min"), InvalidType, "op='min' is not defined on dtype complex64"),
    ("band on float", lambda c: c.allreduce(F32, op="band"), InvalidType, "op='band' is not defined on dtype float32"),
    ("band on float rs", lambda c: c.reduce_scatter(np.ones((2, 2)), op="band"), InvalidType, "reduce_scatter: op='band'"),
    ("root too large", lambda c: c.reduce(F32, root=2), InvalidValue, "reduce: root=2 is out of range"),
    ("root negative", lambda c: c.broadcast(F32, root=-1), InvalidValue, "broadcast: root=-1 is out of range"),
    ("root float", lambda c: c.gather(F32, root=0.0), InvalidType, "gather: root=0.0"),
    ("root bool", lambda c: c.scatter(np.ones((2, 1)), root=True), InvalidType, "scatter: root=True"),
    ("root str", lambda c: c.broadcast(F32, root="0"), InvalidType, "broadcast: root='0'"),
    ("dest too large", lambda c: c.send(F32, dest=2), InvalidValue, "send: dest=2 is out of range"),
    ("dest float", lambda c: c.send(F32, dest=1.0), InvalidType, "send: dest=1.0"),
    ("dest bool", lambda c: c.send(F32, dest=False), InvalidType, "send: dest=False"),
    ("source negative", lambda c: c.recv(source=-1), InvalidValue, "recv: source=-1 is out of range"),
    ("source str", lambda c: c.recv(source="1"), InvalidType, "recv: source='1'"),
    ("tag negative send", lambda c: c.send(F32, dest=1 - c.rank, tag=-1), InvalidValue, "send: tag=-1"),
    ("tag negative recv", lambda c: c.recv(1 - c.rank, tag=-5), InvalidValue, "recv: tag=-5"),
    ("tag float", lambda c: c.recv(1 - c.rank, tag=1.5), InvalidType, "recv: tag=1.5"),
    ("color float", lambda c: c.split(1.0), InvalidType, "split: color=1.0"),
    ("color str", lambda c: c.split("red"), InvalidType, "split: color='red'"),
    ("color negative", lambda c: c.split(-1), InvalidValue, "split: color=-1"),
    ("key float", lambda c: c.split(0, key=0.5), InvalidType, "split: key=0.5"),
    ("key str", lambda c: c.split(0, key="a"), InvalidType, "split: key='a'"),
    ("key None", lambda c: c.split(0, key=None), InvalidType, "split: key=None"),
    ("scatter blocks", lambda c: c.scatter(np.ones((3, 2)), root=0), InvalidValue, "scatter: x has shape (3, 2)"),
    ("scatter 0-d", lambda c: c.scatter(np.float32(1), root=0), InvalidValue, "scatter: x has shape ()"),
    ("alltoall blocks", lambda c: c.alltoall(np.ones((1, 2))), InvalidValue, "alltoall: x has shape (1, 2)"),
    ("alltoall 0-d", lambda c: c.alltoall(np.array(1.0)), InvalidValue, "alltoall: x has shape ()"),
    ("reduce_scatter blocks", lambda c: c.reduce_scatter(np.ones(3)), InvalidValue, "reduce_scatter: x has shape (3,)"),
    ("reduce_scatter 0-d", lambda c: c.reduce_scatter(np.array(1)), InvalidValue, "reduce_scatter: x has shape ()"),
    ("free the world", lambda c: c.free(), InvalidValue, "free: the world communicator cannot be freed"),
]


@pytest.mark.parametrize("program, error, fragment", [case[1:] for case in BAD_CALLS], ids=[case[0] for case in BAD_CALLS])
def test_bad_arguments_raise_invalid_argument_naming_the_call(world2, program, error, fragment):
    with pytest.raises(simdist.RankError) as info:
        world2.run(program)
    err = info.value
    assert 0 in err.failures  # rank 0 (root where there is one) made the bad call
    for rank, exc in err.exceptions.items():
        assert type(exc) is error, (rank, exc)
        assert f"rank {rank}: " in str(exc)
        assert fragment in str(exc)
        assert fragment in err.failures[rank]
    assert sorted(err.exceptions) == sorted(err.failures)
    assert_usable(world2)


ACCEPTED_FORMS = [
    # (id, program, expected result on every rank): numpy scalars and str subclasses are fine
    ("root numpy int", lambda c: c.broadcast(np.arange(2.0) if c.rank == 1 else None, root=np.int64(1)).tolist(), [0.0, 1.0]),
    ("dest, source, tag numpy ints", lambda c: (c.send(np.ones(1), dest=np.int32(1 - c.rank), tag=np.uint8(4)), c.recv(np.int64(1 - c.rank), tag=np.int16(4)))[1].tolist(), [1.0]),
    ("color and key numpy ints", lambda c: c.split(np.int64(0), key=np.int32(-c.rank)).rank, None),
    ("op numpy str", lambda c: c.allreduce(np.arange(2.0) + c.rank, op=np.str_("max")).tolist(), [1.0, 2.0]),
]


@pytest.mark.parametrize("program, expected", [case[1:] for case in ACCEPTED_FORMS], ids=[case[0] for case in ACCEPTED_FORMS])
def test_numpy_scalars_and_str_subclasses_are_accepted(world2, program, expected):
    results = world2.run(program)
    if expected is None:  # split ordered by key: rank 1 comes first
        assert results == [1, 0]
    else:
        assert results == [expected, expected]


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"size": 0}, InvalidValue, "size=0"),
        ({"size": -2}, InvalidValue, "size=-2"),
        ({"size": "4"}, InvalidType, "size='4'"),
        ({"size": 2.0}, InvalidType, "size=2.0"),
        ({"size": True}, InvalidType, "size=True"),
        ({"size": 2, "timeout": -1}, InvalidValue, "timeout=-1"),
        ({"size": 2, "timeout": 0}, InvalidValue, "timeout=0"),
        ({"size": 2, "backend": "nccl"}, InvalidValue, "backend='nccl'"),
        ({"size": 2, "start_method": "thread"}, InvalidValue, "start_method='thread'"),
        ({"size": 2, "slot_bytes": 0}, InvalidValue, "slot_bytes=0"),
        ({"size": 2, "slot_bytes": "big"}, InvalidType, "slot_bytes='big'"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else None,
)
def test_world_arguments_are_validated(kwargs, error, fragment):
    with pytest.raises(error) as info:
        simdist.World(**kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, simdist.SimdistError)
