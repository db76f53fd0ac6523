"""Properties of send/recv, barrier and split, on the backend under test."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simdist import reference

from . import strategies as s


def _exchange(comm, messages, synchronous):
    """Each rank sends its messages in list order, then receives its own;
    with ``synchronous`` sends (which wait for their recv) every rank takes
    the list in order instead, each message sent and then received."""
    received = []
    for i, (src, dst, tag, length) in enumerate(messages):
        if comm.rank == src:
            comm.send(np.arange(length, dtype=np.int64) + 1000 * i, dst, tag)
        elif comm.rank == dst and synchronous:
            received.append((i, comm.recv(src, tag)))
    if synchronous:
        return received
    for i, (src, dst, tag, length) in enumerate(messages):
        if comm.rank == dst:
            received.append((i, comm.recv(src, tag)))
    return received


@pytest.mark.simdist_collectives("send_recv")
@given(st.data())
def test_messages_arrive_in_order_per_source_and_tag(world, data):
    messages = data.draw(s.messages(world.size))
    outs = world.run(_exchange, messages, world.world.sync_sends)
    for rank, received in enumerate(outs):
        # Receives are posted in list order per (source, tag), so the k-th
        # receive from (src, tag) must get the k-th message sent on it.
        for i, got in received:
            src, dst, tag, length = messages[i]
            want = np.arange(length, dtype=np.int64) + 1000 * i
            assert got.dtype == want.dtype and np.array_equal(got, want), \
                f"rank {rank}: receive {i} from rank {src} with tag {tag} got {got}, expected message {want}"


def _barrier(comm, late: int, delay: float):
    if comm.rank == late:
        time.sleep(delay)
    entered = time.monotonic()
    comm.barrier()
    return entered, time.monotonic()


@pytest.mark.simdist_collectives("barrier")
@given(st.data())
def test_barrier_returns_only_after_every_rank_has_called_it(world, data):
    late = data.draw(s.roots(world.size))
    outs = world.run(_barrier, late, 0.05)
    last_entry = max(entered for entered, _ in outs)
    for rank, (_, left) in enumerate(outs):
        assert left >= last_entry, f"rank {rank} left the barrier before rank {late} entered it"


def _split_and_reduce(comm, colors, data, rounds):
    color, key = colors[comm.rank]
    sub = comm.split(color, key)
    if sub is None:
        return None
    results = [(sub.rank, sub.size, sub.allreduce(data[comm.rank] * (r + 1), "sum"),
                sub.allgather(np.array([comm.rank]))) for r in range(rounds)]
    sub.free()
    return results


@pytest.mark.simdist_collectives("allreduce", "allgather")   # those of the sub-communicators
@given(st.data())
def test_split_sub_communicators_behave_as_worlds_of_their_own(world, data):
    colors = data.draw(s.colors_and_keys(world.size))
    arrays = data.draw(s.rank_arrays(world.size, np.dtype(np.float64), (3,)))
    outs = world.run(_split_and_reduce, colors, arrays, 2)
    groups: dict = {}
    for rank, (color, key) in enumerate(colors):
        if color is not None:
            groups.setdefault(color, []).append((key, rank))
    for rank, (color, _) in enumerate(colors):
        if color is None:
            assert outs[rank] is None, f"rank {rank} passed color None but got a communicator"
            continue
        members = [r for _, r in sorted(groups[color])]
        for r_i, (sub_rank, sub_size, total, gathered) in enumerate(outs[rank]):
            assert (sub_rank, sub_size) == (members.index(rank), len(members)), \
                f"rank {rank}: sub-communicator rank/size {(sub_rank, sub_size)}, expected " \
                f"{(members.index(rank), len(members))} (members by key: {members})"
            assert gathered.ravel().tolist() == members, \
                f"rank {rank}: sub-communicator allgather order {gathered.ravel().tolist()}, expected {members}"
            parts = [arrays[m] * (r_i + 1) for m in members]
            verdict = reference.check("allreduce", parts, [total] * len(parts))
            assert verdict.ok, f"rank {rank}, color {color}: {verdict.reason}"
        peers = [outs[m][0][2].tobytes() for m in members]
        assert len(set(peers)) == 1, f"color {color}: members got different bits"
