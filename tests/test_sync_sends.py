"""Synchronous sends (``World(sync_sends=True)``) and deadlocks reported with their cycle.

A ring where every rank sends before it receives passes with buffered sends
and deadlocks under MPI above the eager limit; with synchronous sends it
deadlocks here at every size, and the simulator reports the wait-for cycle
as soon as no rank can move (``simdist.Deadlock``).
"""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest

import simdist

HERE = "test_sync_sends.py"


def _line(fn, marker: str) -> int:
    """The line of ``fn``'s source that contains ``marker``."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def unsafe_ring(comm, n=10):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    comm.send(np.full(n, comm.rank, np.int32), dest=right)  # every rank sends first
    return int(comm.recv(source=left)[-1])


def safe_ring(comm, n=10):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    x = np.full(n, comm.rank, np.int32)
    if comm.rank % 2 == 0:
        comm.send(x, dest=right)
        got = comm.recv(source=left)
    else:
        got = comm.recv(source=left)
        comm.send(x, dest=right)
    return int(got[-1])


@pytest.fixture(scope="module")
def sync2():
    with simdist.World(2, timeout=60, sync_sends=True) as world:
        yield world


@pytest.fixture(scope="module")
def sync3():
    with simdist.World(3, timeout=60, sync_sends=True) as world:
        yield world


@pytest.fixture
def synchronous(request, sync2, sync3):
    """A world of ``request.param`` ranks with synchronous sends (2 and 3 shared)."""
    n = request.param
    if n in (2, 3):
        yield {2: sync2, 3: sync3}[n]
        return
    with simdist.World(n, timeout=60, sync_sends=True) as world:
        yield world


SIZES = [pytest.param(2, marks=pytest.mark.slow), 3, pytest.param(5, marks=pytest.mark.slow)]


@pytest.mark.parametrize("synchronous", SIZES, indirect=True)
def test_a_ring_that_sends_before_it_receives_deadlocks_at_once_with_its_cycle(synchronous):
    world, n = synchronous, synchronous.size
    line = _line(unsafe_ring, "every rank sends first")
    started = time.monotonic()
    with pytest.raises(simdist.Deadlock) as info:
        world.run(unsafe_ring)
    assert time.monotonic() - started < 10  # at once, not at the 60 s timeout
    assert world.run(safe_ring) == [(r - 1) % n for r in range(n)]  # usable again
    err = info.value
    assert isinstance(err, simdist.CollectiveTimeout) and err.at_once and err.closed
    assert err.cycle == [(r, f"send(dest={(r + 1) % n}, tag=0) at {HERE}:{line}") for r in range(n)]
    first = str(err).splitlines()[0]
    links = " <- ".join(f"rank {r} in send(dest={(r + 1) % n}, tag=0) at {HERE}:{line}" for r in range(n))
    assert first == f"deadlock: {links} <- rank 0"
    for r in range(n):
        assert f"waiting in send #1 to rank {(r + 1) % n} (tag=0, 40 bytes, synchronous) at {HERE}:{line}" \
            in err.report[r]


@pytest.mark.slow
def test_the_same_ring_passes_with_buffered_sends_the_default():
    with simdist.World(3, timeout=60) as world:
        assert world.run(unsafe_ring) == [2, 0, 1]


@pytest.mark.parametrize("synchronous", SIZES, indirect=True)
def test_a_ring_where_even_ranks_send_first_passes_with_synchronous_sends(synchronous):
    n = synchronous.size
    assert synchronous.run(safe_ring) == [(r - 1) % n for r in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("synchronous", [2, 3, 5], indirect=True)
def test_a_ring_of_messages_larger_than_a_ring_buffer_passes_with_synchronous_sends(synchronous):
    n = synchronous.size
    assert synchronous.run(safe_ring, 300_000) == [(r - 1) % n for r in range(n)]


def _stashed_but_not_received(comm):
    if comm.rank == 0:
        comm.send(np.ones(2), dest=1, tag=1)  # rank 1 only sets it aside: never taken
        comm.send(np.ones(2), dest=1, tag=2)
    else:
        comm.recv(0, tag=2)  # reads tag 1 into its stash, then waits for tag 2
        comm.recv(0, tag=1)


def test_a_message_stashed_by_a_recv_for_another_tag_does_not_release_a_synchronous_sender(sync2):
    with pytest.raises(simdist.Deadlock) as info:
        sync2.run(_stashed_but_not_received)
    assert [(r, call.split(" at ")[0]) for r, call in info.value.cycle] == [
        (0, "send(dest=1, tag=1)"), (1, "recv(source=0, tag=2)")]


@pytest.mark.slow
def test_a_message_stashed_by_a_recv_for_another_tag_is_fine_with_buffered_sends():
    with simdist.World(2, timeout=60) as world:
        assert world.run(_stashed_but_not_received) == [None, None]


def _taken_late(comm, delay, size, stash_first):
    if comm.rank == 0:
        comm.send(np.arange(size), dest=1, tag=1)
        return time.monotonic()  # when the send returned
    time.sleep(delay)
    if stash_first:  # a probe for another tag moves the message to the stash
        assert comm.transport.probe(0, 5, block=False) is None
        time.sleep(delay)
    taken = time.monotonic()
    assert np.array_equal(comm.recv(0, tag=1), np.arange(size))
    return taken


@pytest.mark.parametrize("size, stash_first", [
    (10, False), (10, True), pytest.param(400_000, False, marks=pytest.mark.slow)],
    ids=["small", "stashed-first", "larger-than-a-ring"])
def test_a_synchronous_send_returns_once_a_recv_posted_later_takes_it(sync2, size, stash_first):
    returned, taken = sync2.run(_taken_late, 0.1, size, stash_first)
    assert returned >= taken  # the send waited for the recv (one monotonic clock for the machine)


@pytest.mark.slow
def test_a_buffered_send_returns_before_the_recv():
    with simdist.World(2, timeout=60) as world:
        returned, taken = world.run(_taken_late, 0.3, 10, False)
    assert returned < taken


def _probe_any_while_peer_receives(comm):
    if comm.rank == 0:
        return comm.transport.probe()  # from any rank: nobody sends to rank 0
    return comm.recv(0, tag=3)


@pytest.mark.slow
def test_a_probe_from_any_rank_ends_the_chain_with_any_rank():
    with simdist.World(2, timeout=60) as world:
        with pytest.raises(simdist.Deadlock) as info:
            world.run(_probe_any_while_peer_receives)
    err = info.value
    assert not err.closed and [r for r, _ in err.cycle] == [0]
    assert err.cycle[0][1].startswith("probe(source=any, tag=any) at ")
    assert str(err).splitlines()[0].endswith(" <- any rank")


def _one_computes(comm, seconds):
    if comm.rank == 0:
        time.sleep(seconds)  # computing: the others' waits may still end
        comm.send(np.ones(1), dest=1)
        comm.send(np.ones(1), dest=2)
        return 0
    return int(comm.recv(0)[0])


@pytest.mark.slow
def test_ranks_waiting_for_a_rank_that_computes_are_no_deadlock(sync3):
    assert sync3.run(_one_computes, 1.0) == [0, 1, 1]


def _pair_deadlocks_while_one_computes(comm, busy):
    if comm.rank == 2:
        end = time.monotonic() + 600
        while busy and time.monotonic() < end:  # uses a CPU: the rank computes
            sum(range(1000))
        time.sleep(600)
    return comm.recv(1 - comm.rank)


@pytest.mark.slow
@pytest.mark.parametrize("busy", [False, True], ids=["sleeping", "using a CPU"])
def test_a_cycle_next_to_a_computing_rank_is_reported_at_the_timeout(busy):
    with simdist.World(3, timeout=1.0) as world:
        started = time.monotonic()
        with pytest.raises(simdist.Deadlock) as info:
            world.run(_pair_deadlocks_while_one_computes, busy)
        assert 1.0 <= time.monotonic() - started < 30
        assert world.run(lambda comm: comm.rank) == [0, 1, 2]
    err = info.value
    assert not err.at_once and [r for r, _ in err.cycle] == [0, 1]
    assert "no progress for 1 s (the world's timeout)" in str(err)
    assert "running user code" in err.report[2]


def test_deadlock_pickles_with_its_attributes():
    err = simdist.Deadlock(2.0, {1: "waiting in recv", 0: "waiting in send"},
                           [(0, "send(dest=1, tag=0) at a.py:3"), (1, "recv(source=0, tag=0) at a.py:4")])
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.timeout, copy.cycle, copy.closed, copy.at_once) == (2.0, err.cycle, True, True)
    assert list(copy.report) == [0, 1] and str(copy) == str(err)


def test_sync_sends_must_be_a_bool():
    with pytest.raises(simdist.InvalidType, match="sync_sends"):
        simdist.World(2, sync_sends="yes")


@pytest.mark.slow
def test_on_mpi_a_ring_that_sends_first_hangs_with_ssend_and_passes_when_buffered():
    with simdist.World(2, backend="mpi", timeout=3.0, sync_sends=True) as world:
        assert world.run(safe_ring) == [1, 0]
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(unsafe_ring)
        assert all("waiting" in info.value.report[r] for r in (0, 1)), info.value.report
    with simdist.World(2, backend="mpi", timeout=3.0) as world:
        assert world.run(unsafe_ring) == [1, 0]  # small: Open MPI buffers it (eager)


RING_COMM = '''
import numpy as np


class RingComm:
    """A ring allreduce (reduce-scatter, then allgather) on send/recv, where
    every rank sends before it receives."""

    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)

    def allreduce(self, x, op="sum"):
        n, r = self.base.size, self.base.rank
        if op != "sum" or n == 1:
            return self.base.allreduce(x, op)
        flat = np.array(x, copy=True).reshape(-1)
        chunks = np.array_split(np.arange(flat.size), n)
        right, left = (r + 1) % n, (r - 1) % n
        for step in range(n - 1):
            self.base.send(flat[chunks[(r - step) % n]], right)
            flat[chunks[(r - step - 1) % n]] += self.base.recv(left)
        for step in range(n - 1):
            self.base.send(flat[chunks[(r + 1 - step) % n]], right)
            flat[chunks[(r - step) % n]] = self.base.recv(left)
        return flat.reshape(x.shape)


def make(base):
    return RingComm(base)
'''


@pytest.mark.slow
def test_check_with_synchronous_sends_fails_a_ring_allreduce_that_sends_first(tmp_path, monkeypatch):
    from simdist.reference import sweep

    (tmp_path / "ringcomm.py").write_text(RING_COMM)
    monkeypatch.syspath_prepend(str(tmp_path))
    options = dict(quick=True, collectives=["allreduce"], dtypes=["int32"], timeout=60)
    buffered = sweep(3, "sim", "ringcomm:make", **options)
    assert buffered["ok"], buffered["rows"]
    synchronous = sweep(3, "sim", "ringcomm:make", sync_sends=True, **options)
    assert not synchronous["ok"]
    reasons = [row["reason"] for row in synchronous["rows"] if row["verdict"] == "FAIL"]
    assert reasons and all(r.startswith("deadlock: rank 0 in send(dest=1, tag=0) at ringcomm.py:") for r in reasons), \
        reasons


@pytest.mark.slow
def test_the_property_suite_fails_that_ring_by_default_and_passes_it_with_buffered_sends(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "ringcomm.py").write_text(RING_COMM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
               SIMDIST_PROPERTY_EXAMPLES="5")
    command = [sys.executable, "-m", "pytest", "--pyargs", "properties", "-q", "-p", "no:cacheprovider",
               "--simdist-backend", "ringcomm:make", "--simdist-np", "3", "-k", "allreduce", "-x"]
    default = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert default.returncode == 1, default.stdout[-3000:]
    assert "deadlock: rank 0 in send(dest=1, tag=0) at ringcomm.py:" in default.stdout, default.stdout[-3000:]
    buffered = subprocess.run(command + ["--simdist-buffered-sends"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
    assert buffered.returncode == 0, buffered.stdout[-3000:]
