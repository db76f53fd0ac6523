"""``SimComm.alltoall_sized``: an alltoall of blocks of any lengths, packed
straight into the rank's slot and unpacked straight from the sender's, the
path of the simulated mpi4py's Alltoallv and Alltoallw. The lengths travel
with the blocks: one meeting when every block fits in its row, else that
meeting names the longest block and phases of that width follow."""

from __future__ import annotations

import numpy as np
import pytest

import simdist

SLOT = 64 << 10  # a small slot, so a block of a few tens of KiB takes several phases


def _room(n: int) -> int:
    """The bytes of a block that fit in its row: a member's share of half a slot, less its head."""
    return (SLOT // 2 // n & ~15) - 16


def _block(sender: int, receiver: int, length: int) -> np.ndarray:
    return ((np.arange(length) * 7 + sender * 31 + receiver * 5) % 251).astype(np.uint8)


def _exchange(comm, lengths, expected=None):
    """Every rank sends its block for ``j`` (``lengths[me][j]`` bytes) and
    returns (what it was told came, what it unpacked, its packs)."""
    me, n = comm.rank, comm.size
    expected = expected[me] if expected else [lengths[j][me] for j in range(n)]
    got = [np.zeros(expected[j], np.uint8) for j in range(n)]
    packs, unpacked = [], set()

    def pack(j, lo, out):
        packs.append((j, lo, out.size))
        out[...] = _block(me, j, lengths[me][j])[lo:lo + out.size]

    def unpack(j, lo, data):
        unpacked.add(j)
        got[j][lo:lo + data.size] = data

    came, whole = comm.alltoall_sized(lengths[me], pack, unpack, expected)
    assert not whole
    if came == expected:
        assert all(np.array_equal(got[j], _block(j, me, expected[j])) for j in range(n)), me
    return came, sorted(unpacked), packs


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("length", [0, 1, 100, 40_000])
def test_every_block_arrives_whole_in_one_phase_or_many(n, length):
    lengths = [[length] * n for _ in range(n)]
    with simdist.World(n, slot_bytes=SLOT) as world:
        out = world.run(_exchange, lengths)
    came, unpacked, packs = out[0]
    assert came == [length] * n
    assert unpacked == (list(range(n)) if length else [])
    if length <= _room(n):
        assert packs == [(j, 0, length) for j in range(n) if length], packs
    else:  # the one meeting packs nothing, then chunks of the whole width, from multiples of 8
        phases = -(-length // (SLOT // n // 8 * 8))
        assert len(packs) == n * phases and all(lo % 8 == 0 for _, lo, _ in packs), packs
        assert all(sum(size for j2, _, size in packs if j2 == j) == length for j in range(n))


def test_blocks_of_different_lengths_arrive_as_sent_in_one_phase_or_many():
    short = [[10, 0, 700], [3, 650, 1], [0, 8, 9]]
    long = [[10, 0, 70_000], [3, 65_000, 1], [0, 8, 9]]
    for lengths in (short, long):
        with simdist.World(3, slot_bytes=SLOT) as world:
            out = world.run(_exchange, lengths)
        assert [row[0] for row in out] == [[lengths[j][me] for j in range(3)] for me in range(3)]


@pytest.mark.parametrize("longest", [500, 50_000])
def test_a_rank_expecting_other_lengths_is_told_and_unpacks_nothing(longest):
    lengths = [[4, longest], [24, 8]]
    expected = [[4, 24], [longest, 16]]  # rank 1 expects 16 bytes from itself, gets 8
    with simdist.World(2, slot_bytes=SLOT) as world:
        out = world.run(_exchange, lengths, expected)
    assert out[0][:2] == ([4, 24], [0, 1])
    assert out[1][:2] == ([longest, 8], [])


def test_it_never_meets_a_plain_alltoall_of_the_same_bytes():
    def fn(comm):
        if comm.rank == 0:
            comm.alltoall_sized([8, 8], lambda j, lo, out: None, lambda j, lo, data: None, [8, 8])
        else:
            comm.alltoall(np.zeros((2, (SLOT // 2 // 2 & ~15)), np.uint8))

    with simdist.World(2, slot_bytes=SLOT) as world, pytest.raises(simdist.CollectiveMismatch, match="alltoall"):
        world.run(fn)


def test_another_collective_is_a_mismatch_on_every_rank():
    def fn(comm):
        if comm.rank == 0:
            comm.alltoall_sized([1, 1], lambda j, lo, out: None, lambda j, lo, data: None, [1, 1])
        else:
            comm.barrier()

    with simdist.World(2) as world, pytest.raises(simdist.CollectiveMismatch) as raised:
        world.run(fn)
    assert "rank 0 called alltoall #1 (blocks of any lengths), rank 1 called barrier #1" in str(raised.value)


def _rows_exchange(comm, length: int):
    """Every rank's blocks as the rows of one array, moved by ``rows``."""
    me, n = comm.rank, comm.size
    send = np.stack([_block(me, j, length) for j in range(n)]).view(np.uint32)
    recv = np.zeros_like(send)

    def fail(j, lo, out):
        raise AssertionError("rows move every block")

    rows = (send, recv)
    came, whole = comm.alltoall_sized([send[0].nbytes] * n, fail if length <= _room(n) else lambda j, lo, out: None,
                                      fail if length <= _room(n) else lambda j, lo, data: None,
                                      [send[0].nbytes] * n, rows)
    assert whole == (length <= _room(n))
    if whole:
        assert all(np.array_equal(recv[j].view(np.uint8), _block(j, me, length)) for j in range(n)), me
    return came


@pytest.mark.parametrize("n", [1, 2, 3])
def test_rows_move_every_block_at_once_where_they_fit(n):
    for length in (8, 4_000, 40_000):
        with simdist.World(n, slot_bytes=SLOT) as world:
            assert world.run(_rows_exchange, length)[0] == [length] * n


def test_members_whose_rows_do_not_step_evenly_move_each_block():
    def fn(comm):
        sub = comm.split(0 if comm.rank != 2 else None)  # world ranks 0, 1, 3: slots that do not step evenly
        if sub is None:
            return None
        _, unpacked, _ = _exchange(sub, [[16] * 3 for _ in range(3)])
        send, recv = np.full((3, 16), 7, np.uint8), np.zeros((3, 16), np.uint8)
        came, whole = sub.alltoall_sized([16] * 3, lambda j, lo, out: None, lambda j, lo, data: None, [16] * 3,
                                         (send, recv))
        assert not whole and not recv.any()  # the rows were not used: pack and unpack moved nothing
        return unpacked

    with simdist.World(4, slot_bytes=SLOT) as world:
        assert world.run(fn) == [[0, 1, 2], [0, 1, 2], None, [0, 1, 2]]


def test_rows_too_short_for_their_heads_exchange_the_lengths_first():
    """Half a slot shared by so many members that a row cannot hold its
    head (thousands of ranks): the lengths go in an allgather, the blocks in
    phases. Here a 3-rank world is made to see its half slots so small."""
    def fn(comm):
        comm._half_bytes = 3 * 8  # as the layout of some 20,000 ranks on 256 KiB slots would give
        lengths = [[10, 0, 700], [3, 650, 1], [0, 8, 9]]
        came, unpacked, packs = _exchange(comm, lengths)
        assert all(lo % 8 == 0 for _, lo, _ in packs), packs
        mismatched = _exchange(comm, lengths, [[10, 3, 0], [0, 650, 8], [700, 1, 10]])
        return came, mismatched[:2]

    with simdist.World(3, slot_bytes=SLOT) as world:
        out = world.run(fn)
    assert [row[0] for row in out] == [[10, 3, 0], [0, 650, 8], [700, 1, 9]]
    assert out[2][1] == ([700, 1, 9], []) and out[0][1] == ([10, 3, 0], [0, 1])  # rank 2 expected 10 from itself
