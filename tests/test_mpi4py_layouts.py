"""A derived datatype's layout (``fake_backends.mpi4py._layouts``): a type
map that is a grid of equal runs moves by strided copies, and moves the
very bytes its byte index names, in the same order; any other type map
moves through its byte index."""

from __future__ import annotations

import numpy as np
import pytest

from fake_backends.mpi4py import MPI
from fake_backends.mpi4py._layouts import Blocks, Grid, Scattered, layout_of

D = MPI.DOUBLE


TYPES = {  # name: (how to make it, whether 1 and 3 of it are a grid)
    # 3 of these: runs of one copy and the next touch, yet a grid of copies
    "vector": (lambda: D.Create_vector(5, 1, 4), (True, True)),  # the extent ends one element past the last
    "vector of runs": (lambda: D.Create_vector(3, 2, 5), (True, True)),
    "negative stride": (lambda: D.Create_vector(4, 1, -3), (True, True)),
    "subarray 3-d": (lambda: MPI.DOUBLE_COMPLEX.Create_subarray([4, 6, 5], [4, 3, 5], [0, 3, 0]), (True, True)),
    "subarray inner cut": (lambda: MPI.INT.Create_subarray([4, 6, 5], [2, 3, 2], [1, 2, 3]), (True, True)),
    "indexed, uneven": (lambda: D.Create_indexed([1, 3], [0, 5]), (False, False)),
    "struct of two kinds": (lambda: MPI.Datatype.Create_struct([1, 1], [0, 12], [MPI.INT, D]), (False, False)),
    "below zero": (lambda: D.Create_indexed_block(1, [-1, 1]), (True, True)),
    "contiguous": (lambda: D.Create_contiguous(7), (True, True)),
    # blocks whose grids join: runs that continue each other, equal grids evenly stepped
    "struct, a vector and a remainder": (lambda: MPI.Datatype.Create_struct(
        [1, 1], [0, 40], [MPI.BYTE.Create_vector(4, 10, 10), MPI.BYTE.Create_contiguous(7)]), (True, True)),
    "struct, two kinds that touch": (lambda: MPI.Datatype.Create_struct([1, 2], [0, 4], [MPI.INT, D]), (True, True)),
    "struct stepping down": (lambda: MPI.Datatype.Create_struct([1, 1], [64, 0], [D, D]), (True, True)),
    "indexed, evenly stepped": (lambda: D.Create_indexed([2, 2, 2], [0, 5, 10]), (True, True)),
    "struct of vectors, evenly stepped": (lambda: MPI.Datatype.Create_struct(
        [1, 1, 1], [0, 64, 128], [D.Create_vector(2, 1, 3)] * 3), (True, True)),
}


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("count", [1, 3])
def test_a_layout_moves_exactly_the_bytes_of_the_type_map(name, count):
    make, grids = TYPES[name]
    datatype = make().Commit()
    tm = datatype._typemap("test")
    index = tm.byte_index(count)
    layout = tm.layout(count)
    assert isinstance(layout, Grid) == grids[count > 1], layout
    assert (layout.lo, layout.hi, layout.nbytes) == (int(index.min()), int(index.max()), index.size)
    shift = -layout.lo + 16  # place it with room on both sides
    memory = np.random.default_rng(7).integers(0, 256, layout.hi - layout.lo + 32, dtype=np.uint8)
    placed = layout.at(shift)
    assert np.array_equal(placed.gather(memory), memory[index + shift])
    packed = np.random.default_rng(8).integers(0, 256, index.size, dtype=np.uint8)
    for nbytes in (index.size, index.size // 2):  # whole, and a shorter receive
        want, got = memory.copy(), memory.copy()
        want[(index + shift)[:nbytes]] = packed[:nbytes]
        placed.scatter(got, packed, nbytes)
        assert np.array_equal(got, want), nbytes
    n = index.size  # any range of the packed bytes, as a chunked message moves them
    for lo, hi in {(0, n), (0, n // 2), (n // 3, n), (8, n - 8), (3, n - 5), (n // 2, n // 2 + 1), (n, n)}:
        lo, hi = max(0, min(lo, n)), max(0, min(hi, n))
        if hi < lo:
            continue
        out = np.full(hi - lo, 255, np.uint8)
        placed.gather_range(memory, out, lo)
        assert np.array_equal(out, memory[index + shift][lo:hi]), (lo, hi)
        want, got = memory.copy(), memory.copy()
        want[(index + shift)[lo:hi]] = packed[lo:hi]
        placed.scatter_range(got, packed[lo:hi], lo)
        assert np.array_equal(got, want), (lo, hi)
    datatype.Free()


def test_a_grid_is_found_only_where_the_runs_are_regular():
    assert isinstance(layout_of(np.array([0, 1, 8, 9, 16, 17])), Grid)
    assert isinstance(layout_of(np.array([0, 1, 8, 9, 17, 18])), Scattered)  # uneven step
    assert isinstance(layout_of(np.array([0, 1, 8, 16, 17])), Scattered)     # uneven runs
    grid = layout_of(np.array([0, 1, 4, 5, 20, 21, 24, 25]))
    assert (grid.shape, grid.strides, grid.run) == ((2, 2), (20, 4), 2)


def test_blocks_pack_one_after_another():
    a, b = Grid(0, (2,), (8,), 4), Scattered(np.array([30, 28]))
    blocks = Blocks([a, b.at(2)])
    memory = np.arange(40, dtype=np.uint8)
    assert blocks.gather(memory).tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 32, 30]
    blocks.scatter(memory, np.full(10, 255, np.uint8), 9)
    assert memory[[0, 11, 32]].tolist() == [255, 255, 255] and memory[30] == 30


def test_a_large_count_as_a_vector_and_a_remainder_is_one_run_found_without_a_byte_index():
    """Libraries send more than 2**31 - 1 elements as one element of a
    struct of a vector of that many and the remainder: its layout comes from
    its blocks' grids, never from a byte index (8 bytes per byte moved)."""
    limit = 2**31 - 1
    part, rest = MPI.BYTE.Create_vector(2, limit, limit), MPI.BYTE.Create_contiguous(5)
    big = MPI.Datatype.Create_struct([1, 1], [0, 2 * limit], [part, rest]).Commit()
    tm = big._typemap("test")
    layout = tm.layout(1)
    assert isinstance(layout, Grid) and (layout.start, layout.shape, layout.run) == (0, (), 2 * limit + 5)
    assert tm._index is None and tm._codes is None
    for datatype in (big, part, rest):
        datatype.Free()

