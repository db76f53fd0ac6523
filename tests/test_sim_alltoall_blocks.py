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
