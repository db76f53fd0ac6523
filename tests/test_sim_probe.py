"""SimComm.transport: the simulator's probe and non-waiting send, which the
mpi4py imitation builds MPI_ANY_SOURCE, MPI_ANY_TAG and its progress engine
on (see the Transport docstring), and what else the transport tells it. Real simulated worlds; every test ends with the probed messages
received, so a probe that consumed or reordered one fails."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

import simdist
from simdist.sim._layout import Layout

RING = Layout(4).ring_bytes  # a pair's ring in worlds of up to 8 ranks (1 MiB)
BIG = 4 * RING  # streamed by its sender: bigger than the ring


@pytest.fixture(scope="module")
def world2():
    with simdist.World(2, timeout=30) as world:
        yield world


@pytest.fixture(scope="module")
def world4():
    with simdist.World(4, timeout=30) as world:
        yield world


def test_probe_by_source_and_tag_returns_them_and_recv_gets_that_message(world2):
    def body(comm):
        if comm.rank == 1:
            comm.send(np.array([10]), 0, tag=4)
            comm.send(np.array([20]), 0, tag=6)
            return None
        found = comm.transport.probe(1, 6)  # past the tag-4 message
        again = comm.transport.probe(1, 6, block=False)  # not consumed
        return found, again, comm.recv(1, 6).tolist(), comm.transport.probe(1, 4), comm.recv(1, 4).tolist()

    assert world2.run(body)[0] == ((1, 6), (1, 6), [20], (1, 4), [10])


def test_probe_from_any_source_takes_the_lowest_rank_with_a_message(world4):
    def body(comm):
        if comm.rank in (2, 3):
            comm.send(np.array([comm.rank]), 0, tag=1)
        comm.barrier()  # both messages are in the rings (small: buffered)
        if comm.rank != 0:
            comm.barrier()
            if comm.rank == 1:
                comm.send(np.array([1]), 0, tag=1)
            return None
        first = comm.transport.probe(None, 1)
        got = [int(comm.recv(first[0], 1)[0])]
        second = comm.transport.probe(None, 1, block=False)
        got.append(int(comm.recv(second[0], 1)[0]))
        empty = comm.transport.probe(None, 1, block=False)
        comm.barrier()
        late = comm.transport.probe(None, 1)  # blocks until rank 1 sends
        got.append(int(comm.recv(late[0], 1)[0]))
        return first, second, empty, late, got

    assert world4.run(body)[0] == ((2, 1), (3, 1), None, (1, 1), [2, 3, 1])


def test_blocking_probe_from_any_source_wakes_for_a_late_message(world4):
    def body(comm):
        if comm.rank == 3:
            time.sleep(0.3)  # rank 0 is asleep in its probe by then
            comm.send(np.arange(3), 0, tag=9)
        if comm.rank != 0:
            return None
        found = comm.transport.probe()
        return found, comm.recv(*found).tolist()

    assert world4.run(body)[0] == ((3, 9), [0, 1, 2])


def test_probe_for_any_tag_returns_the_earliest_sent_from_that_source(world2):
    def body(comm):
        if comm.rank == 1:
            for tag, value in [(7, 0), (2, 1), (7, 2), (5, 3)]:
                comm.send(np.array([value]), 0, tag=tag)
            return None
        seen = []
        seen.append(comm.transport.probe(1, 2))  # stashes the first tag-7 message
        for _ in range(4):
            source, tag = comm.transport.probe(1)
            seen.append((tag, int(comm.recv(source, tag)[0])))
        return seen

    assert world2.run(body)[0] == [(1, 2), (7, 0), (2, 1), (7, 2), (5, 3)]


def test_probe_any_tag_and_recv_agree_with_the_send_order_over_many_messages(world2):
    """3,000 messages of odd sizes and four tags, more than the ring holds, so
    records wrap around it; the receiver mixes recv of a chosen tag (which
    stashes the others) with probe-any-tag-then-recv."""
    rng = random.Random(1234)
    plan = [(rng.randrange(4), rng.randrange(0, 900)) for _ in range(3000)]

    def body(comm):
        if comm.rank == 1:
            for i, (tag, n) in enumerate(plan):
                comm.send(np.full(n, i % 251, np.uint8), 0, tag=tag)
            return None
        pending = list(enumerate(plan))  # not yet received, in send order
        order = random.Random(99)
        while pending:
            if order.random() < 0.3:  # recv a tag of some pending message
                tag = pending[order.randrange(len(pending))][1][0]
            else:
                source, tag = comm.transport.probe(1, None)
                assert (source, tag) == (1, pending[0][1][0])
            at = next(k for k, (_, (t, _)) in enumerate(pending) if t == tag)
            i, (_, n) = pending.pop(at)
            got = comm.recv(1, tag)
            assert got.dtype == np.uint8 and got.shape == (n,) and (got == i % 251).all(), (i, tag)
        return comm.transport.probe(1, None, block=False)

    assert world2.run(body)[0] is None


def test_nonblocking_probe_returns_none_when_nothing_matches(world4):
    def body(comm):
        if comm.rank == 0:
            empty = [comm.transport.probe(None, None, block=False), comm.transport.probe(1, 0, block=False)]
        comm.barrier()
        if comm.rank == 1:
            comm.send(np.array([1.5]), 0, tag=3)
        comm.barrier()
        if comm.rank != 0:
            return None
        other_tag = comm.transport.probe(1, 4, block=False)
        other_source = comm.transport.probe(2, 3, block=False)
        other_source_any_tag = comm.transport.probe(3, None, block=False)
        found = comm.transport.probe(None, 3, block=False)
        return empty, other_tag, other_source, other_source_any_tag, found, comm.recv(1, 3).tolist()

    assert world4.run(body)[0] == ([None, None], None, None, None, (1, 3), [1.5])


def test_messages_of_another_communicator_are_not_seen(world4):
    def body(comm):
        sub = comm.split(comm.rank % 2, key=-comm.rank)  # {2, 0} and {3, 1}: sub-rank order reversed
        if comm.rank == 2:
            comm.send(np.array([100]), 0, tag=5)  # world message
        comm.barrier()
        result = None
        if comm.rank == 0:  # sub-rank 1 of {2, 0}
            result = [sub.transport.probe(None, None, block=False), sub.transport.probe(0, 5, block=False)]
        comm.barrier()
        if comm.rank == 2:  # sub-rank 0
            sub.send(np.array([200]), 1, tag=5)
        if comm.rank == 0:
            result.append(sub.transport.probe(None, 5))  # blocks for the sub message
            result.append(comm.transport.probe(None, 5, block=False))  # the world message, in the stash
            result.append(int(sub.recv(0, 5)[0]))
            result.append(int(comm.recv(2, 5)[0]))
            result.append(sub.transport.probe(None, None, block=False))
        sub.free()
        return result

    assert world4.run(body)[0] == [None, None, (0, 5), (2, 5), 200, 100, None]


def test_probe_returns_ranks_of_the_communicator_it_is_called_on(world4):
    def body(comm):
        sub = comm.split(0, key=-comm.rank)  # sub-rank = 3 - world rank
        if comm.rank == 1:  # sub-rank 2
            sub.send(np.array([1]), 3, tag=0)  # to sub-rank 3: world rank 0
        result = None
        if comm.rank == 0:
            result = (sub.transport.probe(), sub.transport.probe(2, 0), sub.recv(2, 0).tolist())
        sub.free()
        return result

    assert world4.run(body)[0] == ((2, 0), (2, 0), [1])


def test_a_message_larger_than_the_ring_is_probed_from_its_header_and_received(world2):
    count = BIG // 8 + 1

    def body(comm):
        if comm.rank == 1:
            comm.send(np.arange(count, dtype=np.float64), 0, tag=2)  # waits for rank 0's recv
            comm.send(np.array([7], np.int16), 0, tag=3)
            return None
        polled = None
        while polled is None:  # the sender cannot finish before the recv below
            polled = comm.transport.probe(1, 2, block=False)
            time.sleep(0.01)
        found = [polled, comm.transport.probe(None, None), comm.transport.probe(1, 2)]
        big = comm.recv(1, 2)
        small = comm.recv(1, 3)
        return found, bool(np.array_equal(big, np.arange(count, dtype=np.float64))), small.tolist()

    assert world2.run(body)[0] == ([(1, 2), (1, 2), (1, 2)], True, [7])


@pytest.mark.parametrize("block", [True, False], ids=["blocking", "nonblocking"])
def test_probing_past_a_large_message_moves_it_aside_for_a_later_recv(world2, block):
    count = BIG // 4 + 3

    def body(comm):
        if comm.rank == 1:
            comm.send(np.arange(count, dtype=np.int32), 0, tag=1)  # streamed
            comm.send(np.array([5]), 0, tag=2)
            return None
        time.sleep(0.2)
        if block:
            found = comm.transport.probe(1, 2)
        else:  # moving the large one aside waits only for its sender
            found = None
            while found is None:
                found = comm.transport.probe(1, 2, block=False)
        small = comm.recv(1, 2).tolist()
        large = comm.recv(1, 1)
        return found, small, bool(np.array_equal(large, np.arange(count, dtype=np.int32)))

    assert world2.run(body)[0] == ((1, 2), [5], True)


def test_try_send_sends_only_what_fits_in_the_ring(world2):
    half = np.zeros(RING // 16 - 8)  # two records of these fill the ring

    def body(comm):
        if comm.rank == 0:
            sent = [comm.transport.try_send(np.zeros(BIG // 8), 1, tag=1)]  # larger than the ring: never
            sent += [comm.transport.try_send(half, 1, tag=2) for _ in range(3)]  # the third finds no room
            comm.barrier()
            comm.barrier()
            sent.append(comm.transport.try_send(half + 3, 1, tag=2))  # room again
            return sent
        comm.barrier()
        refused = comm.transport.probe(0, 1, block=False)  # moves both tag-2 messages aside
        got = [comm.recv(0, tag=2).sum() for _ in range(2)]
        comm.barrier()
        got.append(comm.recv(0, tag=2)[0])
        return refused, got, comm.transport.probe(0, None, block=False)

    sent, (refused, got, left) = world2.run(body)
    assert sent == [False, True, True, False, True]
    assert (refused, got, left) == (None, [0.0, 0.0, 3.0], None)


def test_the_transport_names_the_context_members_and_ring(world4):
    def body(comm):
        sub = comm.split(comm.rank % 2, key=-comm.rank)  # {2, 0} and {3, 1}
        world, mine = comm.transport, sub.transport
        seen = (world.rank, world.size, world.context, world.members, world.world_size, world.ring_bytes,
                mine.rank, mine.size, mine.context != world.context, mine.members)
        sub.free()
        try:
            mine.probe(None, None, block=False)
        except simdist.SimdistError as exc:
            return seen, str(exc)
        return seen, None

    results = world4.run(body)
    for rank, (seen, freed) in enumerate(results):
        members = (2, 0) if rank % 2 == 0 else (3, 1)
        assert seen == (rank, 4, 0, (0, 1, 2, 3), 4, RING, members.index(rank), 2, True, members)
        assert freed is not None and "probe on a communicator that was freed" in freed


def test_record_bytes_is_what_a_message_takes_of_the_ring(world2):
    def body(comm):
        record = comm.transport.record_bytes
        x = np.zeros((RING - record(0, 2)) // 8).reshape(-1, 1)  # exactly fills the ring
        if comm.rank == 0:
            sent = [comm.transport.try_send(np.zeros(x.size + 1).reshape(-1, 1), 1), comm.transport.try_send(x, 1)]
            comm.barrier()
            return sent, record(1, 0), record(8, 1), record(9, 3)
        comm.barrier()
        return comm.recv(0).shape

    sent, *sizes = world2.run(body)[0]
    assert sent == [False, True]
    assert sizes == [48, 56, 80]


def test_probe_checks_its_arguments(world2):
    def body(comm):
        errors = []
        probe = comm.transport.probe
        for call in (lambda: probe(2), lambda: probe(-1), lambda: probe(0, -3),
                     lambda: probe(0, 1.5), lambda: probe("1")):
            try:
                call()
            except simdist.SimdistError as exc:
                errors.append(type(exc).__name__ + ": " + str(exc))
        return errors

    errors = world2.run(body)[0]
    assert len(errors) == 5
    assert "probe: source=2 is out of range" in errors[0]
    assert "probe: source=-1 is out of range" in errors[1]
    assert "probe: tag=-3 must be >= 0" in errors[2]
    assert "probe: tag=1.5" in errors[3]
    assert "probe: source='1'" in errors[4]


# -- waiting: hangs, failures, returns ---------------------------------------------


@pytest.mark.slow
def test_a_probe_that_never_matches_times_out_with_a_report_naming_the_probe():
    with simdist.World(2, timeout=2) as world:

        def program(comm):
            if comm.rank == 0:
                comm.send(np.ones(2), 1, tag=3)  # not what rank 1 probes for
                return comm.transport.probe()  # nobody sends to rank 0
            return comm.transport.probe(0, 7)

        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        assert time.monotonic() - started < 20
        report = info.value.report
        assert "waiting in probe #2 from any rank (tag=any)" in report[0]
        assert "on rank" not in report[0]
        assert "waiting in probe #1 from rank 0 (tag=7)" in report[1]
        assert "on rank 0" in report[1]
        assert "probe" in str(info.value)
        assert world.run(lambda comm: comm.allreduce(np.ones(1))[0]) == [2.0, 2.0]


@pytest.mark.parametrize("source", [None, 1], ids=["any-source", "from-the-failing-rank"])
def test_a_failing_peer_unwinds_a_blocked_probe_quickly(source):
    with simdist.World(3, timeout=60) as world:

        def program(comm):
            if comm.rank == 1:
                time.sleep(0.3)  # rank 0 is asleep in its probe by then
                raise RuntimeError("rank-1-fails")
            if comm.rank == 0:
                return comm.transport.probe(source, 4)
            return None

        started = time.monotonic()
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        elapsed = time.monotonic() - started
        assert sorted(info.value.failures) == [1]
        assert "rank-1-fails" in info.value.failures[1]
        assert info.value.aborted == [0]
        assert elapsed < 1.8, f"the probe unwound after {elapsed:.1f} s, not at once (the grace period is 2 s)"
        assert world.run(lambda comm: comm.rank) == [0, 1, 2]


def test_a_probe_on_ranks_that_all_returned_raises_a_mismatch():
    with simdist.World(3, timeout=60) as world:

        def program(comm):
            if comm.rank == 0:
                return comm.transport.probe(None, 2)
            return None

        with pytest.raises(simdist.CollectiveMismatch) as info:
            world.run(program)
        message = str(info.value)
        assert "rank 0 waits in probe #1 from any rank (tag=2)" in message
        assert "ranks 1, 2 have returned" in message


@pytest.mark.slow
def test_a_rank_that_polls_with_nonblocking_probes_does_not_count_as_progress():
    """The driver's hang watch still sees the peer blocked in recv; the
    polling rank is reported as running user code and unwinds on the abort."""
    with simdist.World(2, timeout=1) as world:
        before = world.pids

        def program(comm):
            if comm.rank == 0:
                while comm.transport.probe(1, 5, block=False) is None:
                    pass
            return comm.recv(0, tag=8)

        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        assert "running user code" in info.value.report[0]
        assert "waiting in recv #1 from rank 0 (tag=8)" in info.value.report[1]
        assert world.pids == before  # the poller unwound; nobody was killed


@pytest.mark.parametrize("universe", [None, "oversubscribe"])
def test_a_poll_of_many_sources_finds_ring_and_stash_in_rank_order(universe):
    """A non-blocking probe over more than a few consecutive ranks looks at
    their rings' words at once (``Mailboxes._with_mail``): it still finds
    the lowest rank with a matching message, whether in its ring or set
    aside by an earlier probe, and nothing once all are received."""
    def body(comm):
        if comm.rank in (2, 5):
            comm.send(np.array([comm.rank]), 0, tag=7)
        if comm.rank == 4:
            comm.send(np.array([40]), 0, tag=3)  # another tag: set aside by the probe for tag 7
            comm.send(np.array([4]), 0, tag=7)
        comm.barrier()
        if comm.rank != 0:
            return None
        transport = comm.transport.universe() if universe else comm.transport
        assert transport.probe(0, 7, block=False) is None
        order = []
        while (found := transport.probe(None, 7, block=False)) is not None:
            order.append(found[0])
            assert int(transport.recv(found[0], 7)[0]) == found[0]
        stashed = transport.probe(None, None, block=False)
        return order, stashed, int(transport.recv(4, 3)[0]), transport.probe(None, None, block=False)

    with simdist.World(6, timeout=30, **({"universe": universe} if universe else {})) as world:
        assert world.run(body)[0] == ([2, 4, 5], (4, 3), 40, None)
