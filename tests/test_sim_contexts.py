"""The simulator holds up to 2047 live sub-communicators per rank, and a
world commits shared memory only for the contexts it uses.

Context 0 is the world's; each live sub-communicator holds one of the
others. The entries of the first 64 contexts are reserved when the world
starts, as before; those of the others only when a rank first takes one,
and they are given back to the system between runs. So 1000 communicators
that a library never frees (as mpi4py programs often do) all work, and a
world that splits once commits what it did when it had 64 contexts.
"""

from __future__ import annotations

import inspect
import os
import time

import numpy as np
import pytest

import simdist
from simdist.sim._layout import CONTEXTS, RESERVED_CONTEXTS, Layout


def _committed(world) -> int:
    """Bytes of the world's arena backed by memory (its memfd's blocks)."""
    return os.fstat(world._driver.arena.fd).st_blocks * 512


def _sparse_contexts_backed(world) -> int:
    """Bytes of the arena's sparse context entries that hold data (written
    pages: reserved ones not yet written count as holes)."""
    arena = world._driver.arena
    at, end, backed = arena.layout.ctx_sparse, arena.layout.rings, 0
    while at < end:
        try:
            at = os.lseek(arena.fd, at, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after ``at``
            break
        hole = min(os.lseek(arena.fd, at, os.SEEK_HOLE), end)
        backed += max(0, hole - at)
        at = hole
    return backed


def _live_subs_carry_calls(comm, count: int):
    """Split ``count`` sub-communicators and keep them all alive; on each, an
    allreduce, then a message around its ring (all sent before any is
    received, so each must reach only its own communicator); free them
    all, in an order that mixes the contexts. Return what each call gave."""
    subs = [comm.split((comm.rank + i) % 2, key=-comm.rank) for i in range(count)]
    sums = [int(sub.allreduce(np.array([comm.rank * count + i], np.int64))[0]) for i, sub in enumerate(subs)]
    for i, sub in enumerate(subs):
        sub.send(np.array([comm.rank, i], np.int64), (sub.rank + 1) % sub.size, tag=i % 3)
    got = [None] * count
    for i in reversed(range(count)):
        sub = subs[i]
        got[i] = sub.recv((sub.rank - 1) % sub.size, tag=i % 3).tolist()
    for i in sorted(range(count), key=lambda i: (i * 7) % count):
        subs[i].free()
    after = comm.split(0)  # a context freed a moment ago, at a fresh epoch
    total = int(after.allreduce(np.array([1], np.int64))[0])
    after.free()
    return sums, got, total


def _expected(rank: int, size: int, count: int):
    sums, got = [], []
    for i in range(count):
        members = sorted((r for r in range(size) if (r + i) % 2 == (rank + i) % 2), reverse=True)
        sums.append(sum(r * count + i for r in members))
        sender = members[(members.index(rank) - 1) % len(members)]
        got.append([sender, i])
    return sums, got, size


def _check_live_subs(world, count: int) -> None:
    results = world.run(_live_subs_carry_calls, count)
    for rank, result in enumerate(results):
        assert result == _expected(rank, world.size, count), f"rank {rank}"


def test_seventy_live_sub_communicators_work_and_their_memory_goes_back():
    """Past the first 64 contexts (62 live sub-communicators was the cap):
    the later contexts' entries are committed while used and given back
    when the next run starts."""
    with simdist.World(2) as world:
        entry = world._driver.arena.layout.entry
        _check_live_subs(world, 70)
        used = _sparse_contexts_backed(world)
        _check_live_subs(world, 70)  # the same contexts again, after the reset
        world.run(lambda comm: None)
        assert 2 * 7 * 4096 <= used <= 2 * 7 * (entry + 4096)  # contexts 64-70 of both ranks
        assert _sparse_contexts_backed(world) == 0


@pytest.mark.slow
def test_a_thousand_live_sub_communicators_on_four_ranks():
    """Each of 1000 live sub-communicators carries a collective and a
    message, then all are freed; the world's next run, on the same
    contexts, works as the first did."""
    with simdist.World(4) as world:
        entry = world._driver.arena.layout.entry
        _check_live_subs(world, 1000)
        assert _sparse_contexts_backed(world) >= 4 * (1001 - 64) * 4096
        _check_live_subs(world, 100)
        assert _sparse_contexts_backed(world) <= 4 * (101 - 64) * (entry + 4096)  # the last run's, not the 1000


def _split_past_the_last_context(comm, live: int):
    subs = [comm.split(0) for _ in range(live)]
    try:
        comm.split(None if comm.rank == 1 else 0)
    except simdist.SimdistError as exc:
        error = str(exc)
    else:
        error = None
    subs.pop(100).free()
    again = comm.split(0)  # takes the context just freed
    total = int(again.allreduce(np.array([1]))[0])
    for sub in subs + [again]:
        sub.free()
    return error, total


@pytest.mark.parametrize("slot_bytes, live", [
    (4096, 447),  # the split's table has room for 448 contexts in a slot of 4 KiB
    pytest.param(None, CONTEXTS - 1, marks=pytest.mark.slow),
])
def test_the_split_past_the_last_context_fails_on_the_ranks_that_asked(slot_bytes, live):
    with simdist.World(2, slot_bytes=slot_bytes) as world:
        results = world.run(_split_past_the_last_context, live)
    assert results[0] == (
        f"rank 0: split: every communicator context is in use ({live} sub-communicators alive); "
        "call free() on the ones you no longer need", 2)
    assert results[1] == (None, 2)  # it asked for none (color None)


def _split_once(comm):
    sub = comm.split(comm.rank % 2)
    return int(sub.allreduce(np.array([1]))[0])


@pytest.mark.slow
def test_a_world_of_64_ranks_that_splits_once_commits_no_sparse_context():
    """What 64 ranks commit is at most the reserved part of the arena, as
    when it had 64 contexts: not the 2048 contexts' entries (277 MiB more)."""
    lay = Layout(64)
    sparse = lay.rings - lay.ctx_sparse
    reserved = lay.ctx_sparse + lay.total - lay.slots
    assert sparse > 200 << 20 and lay.reserved_contexts == RESERVED_CONTEXTS
    with simdist.World(64) as world:
        assert _committed(world) <= reserved
        assert world.run(_split_once) == [32] * 64
        assert _committed(world) <= reserved


def _deadlock_on_late_contexts(comm):
    subs = [comm.split(0) for _ in range(70)]
    if comm.rank == 0:
        subs[69].barrier()
    else:
        subs[68].allreduce(np.ones(3))


@pytest.mark.slow
def test_a_deadlock_on_contexts_past_the_first_64_is_reported_with_both_calls():
    lines, first = inspect.getsourcelines(_deadlock_on_late_contexts)
    at = {call: first + next(i for i, line in enumerate(lines) if call in line) for call in ("barrier", "allreduce")}
    with simdist.World(2, timeout=60) as world:
        with pytest.raises(simdist.Deadlock) as caught:
            world.run(_deadlock_on_late_contexts)
        assert world.run(_split_once) == [1, 1]  # the next run starts clean
    assert caught.value.report == {
        0: f"waiting in barrier #1 on a sub-communicator (context 70) at test_sim_contexts.py:{at['barrier']}, "
           "on rank 1",
        1: "waiting in allreduce #1 (float64 (3,), op=sum) on a sub-communicator (context 69) "
           f"at test_sim_contexts.py:{at['allreduce']}, on rank 0",
    }


def _regroup(comm, rounds):
    """Split into groups that change every round, each freed before the next
    split takes its context again: the same context, other members."""
    sums = []
    for k in range(rounds):
        color = (comm.rank >> (k % 2)) & 1 if k % 3 else comm.rank % 2
        sub = comm.split(color, key=-comm.rank if k % 2 else comm.rank)
        total = sub.allreduce(np.array([comm.rank + 1.0]))[0]
        sums.append((sub.rank, sub.size, total, sub.allgather(np.int64(comm.rank)).tolist()))
        sub.free()
    return sums


def test_a_context_taken_again_by_other_members_moves_between_those_members():
    """A communicator made again on a context and members seen before reuses
    what it found of their words; one made on that context by other members
    must not: each round's groups sum and gather their own ranks only."""
    with simdist.World(4) as world:
        out = world.run(_regroup, 6)
    for rank, rounds in enumerate(out):
        for k, (sub_rank, size, total, gathered) in enumerate(rounds):
            color = (rank >> (k % 2)) & 1 if k % 3 else rank % 2
            group = [r for r in range(4) if ((r >> (k % 2)) & 1 if k % 3 else r % 2) == color]
            order = sorted(group, key=lambda r: -r if k % 2 else r)
            want = (order.index(rank), len(group), sum(r + 1.0 for r in group), order)
            assert (sub_rank, size, total, gathered) == want, (rank, k)


def _free_before_or_after_a_world_barrier(comm):
    """Rank 0 frees its sub-communicator after a world barrier, the others
    before it, as a destructor run at another point on each rank frees."""
    sub = comm.split(0)
    total = int(sub.allreduce(np.array([comm.rank + 1]))[0])
    if comm.rank == 0:
        comm.barrier()
        sub.free()
    else:
        sub.free()
        comm.barrier()
    again = comm.split(0)
    return total, int(again.allreduce(np.array([comm.rank + 1]))[0])


def test_free_waits_for_no_other_member():
    """``free`` is local, as in Open MPI and MPICH: the ranks that free
    before the barrier do not wait there for rank 0, which frees after it."""
    with simdist.World(3, timeout=20) as world:
        assert world.run(_free_before_or_after_a_world_barrier) == [(6, 6)] * 3


def _reuse_while_a_member_still_reads(comm):
    """Ranks 0 and 1 free ``sub`` and take its context again for a
    communicator of their own while rank 2 is still in ``sub``'s last call:
    it arrived, but reads the others' part of it (in their entry of the
    context, where a small allreduce travels) 0.3 s later."""
    pair = comm.split(0 if comm.rank < 2 else 1)
    sub = comm.split(0)
    if comm.rank == 2:
        meet = sub._meet

        def meet_then_pause(*args, **kwargs):
            meet(*args, **kwargs)
            time.sleep(0.3)

        sub._meet = meet_then_pause
    name = sub.name
    total = int(sub.allreduce(np.array([comm.rank + 1]))[0])
    if comm.rank < 2:
        sub.free()
        again = pair.split(0)
        sums = [int(again.allreduce(np.array([10 * k + comm.rank]))[0]) for k in range(3)]
        same_context = again.name == name
        again.free()
    else:
        sums, same_context = None, None
        sub.free()
    comm.barrier()
    return total, sums, same_context


def test_a_context_freed_is_taken_again_only_once_its_members_have_read_their_last_call():
    """The new communicator's calls rewrite the entries the old one's last
    call travelled in: they wait until every member of that call has read it."""
    with simdist.World(3, timeout=20) as world:
        out = world.run(_reuse_while_a_member_still_reads)
    assert out[2] == (6, None, None)
    assert out[0] == out[1] == (6, [1, 21, 41], True)
