"""``SimComm.alltoall_blocks``: an alltoall whose blocks are packed straight
into the rank's slot and unpacked straight from the sender's, the path of
the simulated mpi4py's Alltoallv and Alltoallw. It moves what ``alltoall``
of the same bytes moves, in one phase or in many, and matches as it does."""

from __future__ import annotations

import numpy as np
import pytest

import simdist

SLOT = 64 << 10  # a small slot, so a message of a few hundred KiB takes several phases


def _block(sender: int, receiver: int, width: int) -> np.ndarray:
    return ((np.arange(width) * 7 + sender * 31 + receiver * 5) % 251).astype(np.uint8)


def _exchange(comm, width: int, lengths=None):
    """Every rank sends its block for ``j`` (``lengths[me][j]`` bytes of
    ``width``) and returns what each sender's block for it held."""
    me, n = comm.rank, comm.size
    lengths = lengths or [[width] * n for _ in range(n)]
    got = [np.zeros(lengths[j][me], np.uint8) for j in range(n)]
    calls = []

    def pack(j, lo, out):
        calls.append(("pack", j, lo, out.size))
        mine = _block(me, j, lengths[me][j])[lo:lo + out.size]
        out[:mine.size] = mine

    def unpack(j, lo, data):
        got[j][lo:lo + data.size] = data[:max(0, lengths[j][me] - lo)]

    comm.alltoall_blocks(width, pack, unpack)
    assert all(np.array_equal(got[j], _block(j, me, lengths[j][me])) for j in range(n)), me
    return calls


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("width", [0, 1, 100, 40_000])
def test_every_block_arrives_whole_in_one_phase_or_many(n, width):
    with simdist.World(n, slot_bytes=SLOT) as world:
        calls = world.run(_exchange, width)
    phases = -(-max(width, 1) // (SLOT // n // 8 * 8))
    packs = [c for c in calls[0] if c[0] == "pack"]
    assert len(packs) == n * (phases if width * n > SLOT // 2 else 1), packs
    assert all(c[2] % 8 == 0 for c in packs), "every chunk starts at a multiple of 8 bytes"


def test_blocks_of_different_lengths_share_the_longest_width():
    lengths = [[10, 0, 70_000], [3, 65_000, 1], [0, 8, 9]]
    with simdist.World(3, slot_bytes=SLOT) as world:
        world.run(_exchange, 70_000, lengths)


def test_it_meets_an_alltoall_of_the_same_bytes():
    def fn(comm):
        if comm.rank == 0:
            return _exchange(comm, 300) and None
        out = comm.alltoall(np.stack([_block(comm.rank, j, 300) for j in range(comm.size)]))
        assert all(np.array_equal(out[j], _block(j, comm.rank, 300)) for j in range(comm.size))

    with simdist.World(3) as world:
        world.run(fn)


def test_different_widths_are_a_mismatch_on_every_rank():
    def fn(comm):
        comm.alltoall_blocks(5 + comm.rank, lambda j, lo, out: None, lambda j, lo, data: None)

    with simdist.World(2) as world, pytest.raises(simdist.CollectiveMismatch, match="alltoall"):
        world.run(fn)


def _vexchange(comm, lengths, extra=None):
    """``alltoallv_blocks`` of ``_block``s of ``lengths[me][j]`` bytes: every
    rank checks what it got and returns the lengths it saw and its calls."""
    me, n = comm.rank, comm.size
    got = [np.zeros(lengths[j][me], np.uint8) for j in range(n)]
    calls, seen = [], []

    def pack(j, lo, out):
        calls.append(("pack", j, lo))
        mine = _block(me, j, lengths[me][j])[lo:lo + out.size]
        out[:mine.size] = mine

    def unpack(j, lo, data):
        calls.append(("unpack", j, lo))
        got[j][lo:lo + data.size] = data[:max(0, lengths[j][me] - lo)]

    comm.alltoallv_blocks(lengths[me], pack, unpack, lambda matrix: seen.append(matrix.tolist()))
    got[me][...] = _block(me, me, lengths[me][me])  # a rank's own block is its caller's
    assert all(np.array_equal(got[j], _block(j, me, lengths[j][me])) for j in range(n)), me
    return seen, calls


@pytest.mark.parametrize("lengths", [
    [[0]], [[5]],
    [[0, 3], [7, 0]],
    [[1, 2, 3], [40, 50, 60], [0, 0, 9]],
    [[10, 0, 70_000], [3, 65_000, 1], [0, 8, 9]],   # rank 0's blocks do not fit half a slot
    [[30_000, 30_000, 30_000], [1, 1, 1], [2, 2, 2]],  # nor do these: 60,000 bytes for the others
])
def test_blocks_of_their_own_lengths_arrive_whole_and_every_rank_sees_every_length(lengths):
    n = len(lengths)
    with simdist.World(n, slot_bytes=SLOT) as world:
        outcomes = world.run(_vexchange, lengths)
    fits = all(8 * (n + 1) + sum(row) - row[i] <= SLOT // 2 for i, row in enumerate(lengths))
    for me, (seen, calls) in enumerate(outcomes):
        assert seen == [lengths]
        assert all(j != me for _, j, _ in calls), "a rank's own block is never packed nor unpacked"
        packs = [c for c in calls if c[0] == "pack"]
        if fits:  # one meeting: each block packed once, whole
            assert sorted(packs) == [("pack", j, 0) for j in range(n) if j != me and lengths[me][j]]


def test_blocks_of_their_own_lengths_meet_the_same_call_and_nothing_else():
    def fn(comm):
        if comm.rank == 0:
            comm.alltoall(np.zeros((comm.size, 4), np.uint8))
        else:
            comm.alltoallv_blocks([1] * comm.size, lambda j, lo, out: None, lambda j, lo, data: None,
                                  lambda matrix: None)

    with simdist.World(2) as world, pytest.raises(simdist.CollectiveMismatch, match=r"uint8 \(2, any\)"):
        world.run(fn)
