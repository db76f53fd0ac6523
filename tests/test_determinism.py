"""The simulator's determinism promise, bit for bit.

A reduction is the rank-ascending left fold ``((x0 op x1) op x2) ...`` element
by element in the input dtype; ``mean`` is that sum divided by the size. The
bits are the same on every rank, in every run, on the small path (every rank
folds everything) and on the parallel path (above 64 KiB on three or more
ranks, each rank folds a slice), with any chunking and any start method.

The data are floats of mixed magnitude and sign, so that folding in another
order, or accumulating in a wider type, gives other bits; the tests check that
they do, so that they would notice.
"""

from __future__ import annotations


import numpy as np
import pytest

import reference
import simdist
from reference import assert_bits, left_fold, on_rank

TIMEOUT = 30.0
SMALL = 64 << 10  # bytes: the largest reduction folded by every rank on its own
INEXACT = tuple(np.dtype(n) for n in ("float16", "float32", "float64", "complex64", "complex128"))
def float_ops(dtype) -> tuple[str, ...]:
    return ("sum", "prod", "mean") + (("min", "max") if np.dtype(dtype).kind == "f" else ())


def values(dtype, shape, seed, rank=0) -> np.ndarray:
    """Floats (or complex) of mixed magnitude for ``(seed, rank)``, no zeros."""
    return reference.values(dtype, shape, seed, rank, zeros=0.0)


# -- worlds (module-scoped: they start before conftest's per-test leak guard) ---------


@pytest.fixture(scope="module")
def worlds():
    cache = {}

    def get(size, **options):
        key = (size, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = simdist.World(size, timeout=TIMEOUT, **options)
        return cache[key]

    yield get
    for world in cache.values():
        world.close()


#: 4 ranks only in the full suite here; the fast tier folds on 4 in ``world3plus``.
SIZES = (2, 3, pytest.param(4, marks=pytest.mark.slow))


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"size{n}")
def world(request, worlds):
    return worlds(request.param)


@pytest.fixture(scope="module", params=(3, 4), ids=lambda n: f"size{n}")
def world3plus(request, worlds):
    """Worlds where the order of a fold matters (a + b is b + a)."""
    return worlds(request.param)


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"chunked-size{n}")
def chunked_world(request, worlds):
    return worlds(request.param, slot_bytes=4096)


# -- the reductions under test ---------------------------------------------------


@on_rank
def _rank_reductions(comm, dtype, count, seed):
    """Every float op by allreduce, reduce (to the last rank) and reduce_scatter."""
    x = values(dtype, (count,), seed, comm.rank)
    blocks = values(dtype, (comm.size, count // comm.size), seed + 1, comm.rank)
    out = {}
    for op in float_ops(dtype):
        out["allreduce", op] = comm.allreduce(x, op)
        out["reduce", op] = comm.reduce(x, root=comm.size - 1, op=op)
        out["reduce_scatter", op] = comm.reduce_scatter(blocks, op)
        out["allreduce-blocks", op] = comm.allreduce(blocks, op)[comm.rank].copy()
    return out


def check_reductions(results, dtype, count, seed):
    size = len(results)
    xs = [values(dtype, (count,), seed, r) for r in range(size)]
    bs = [values(dtype, (size, count // size), seed + 1, r) for r in range(size)]
    for op in float_ops(dtype):
        expected = left_fold(op, xs)
        for rank, got in enumerate(results):
            what = f"rank {rank} of {size}, {op} of {count} {dtype}"
            assert_bits(got["allreduce", op], expected, what + " by allreduce")
            if rank == size - 1:
                assert_bits(got["reduce", op], expected, what + " by reduce")
            else:
                assert got["reduce", op] is None
            block = left_fold(op, [b[rank] for b in bs])
            assert_bits(got["reduce_scatter", op], block, what + " by reduce_scatter")
            assert_bits(got["allreduce-blocks", op], block, what + " block of allreduce")


def assert_order_matters(xs, what):
    """The data tell the left fold from the reversed fold and from a sum
    accumulated in float64, so a test that passes could not pass by luck."""
    fold = left_fold("sum", xs)
    assert fold.tobytes() != left_fold("sum", xs[::-1]).tobytes(), f"{what}: order never matters"
    if fold.dtype.kind == "f" and fold.dtype.itemsize < 8:
        wide = left_fold("sum", [x.astype(np.float64) for x in xs]).astype(fold.dtype)
        assert fold.tobytes() != wide.tobytes(), f"{what}: a wider accumulator gives the same bits"


@pytest.mark.parametrize("dtype", INEXACT, ids=str)
def test_small_reductions_equal_the_left_fold_to_the_bit(world, dtype):
    count = 1000  # at most 16 kB: folded by every rank
    results = world.run(_rank_reductions, dtype, count, 61)
    check_reductions(results, dtype, count, 61)
    if world.size >= 3:
        assert_order_matters([values(dtype, (count,), 61, r) for r in range(world.size)], "small")


@pytest.mark.parametrize("dtype", INEXACT, ids=str)
def test_parallel_reductions_equal_the_left_fold_to_the_bit(world, dtype):
    count = (SMALL // dtype.itemsize) * 3 // 2 + 7  # 96 kB and more: folded in slices
    results = world.run(_rank_reductions, dtype, count, 62)
    check_reductions(results, dtype, count, 62)
    if world.size >= 3:
        assert_order_matters([values(dtype, (count,), 62, r) for r in range(world.size)], "parallel")


@pytest.mark.parametrize("dtype", INEXACT, ids=str)
def test_chunked_reductions_equal_the_left_fold_to_the_bit(chunked_world, dtype):
    """4 KiB slots: many chunks, the last of them holding a single element."""
    per_chunk = 4096 // dtype.itemsize
    count = per_chunk * (SMALL // 4096 + 5) + 1  # above 64 KiB, one element in the last chunk
    results = chunked_world.run(_rank_reductions, dtype, count, 63)
    check_reductions(results, dtype, count, 63)


def test_hundred_thousand_float32_fold_in_rank_order_on_the_parallel_path(world3plus):
    """The brief's case: ~100k float32 on 3 and 4 ranks, folded in slices."""
    count = 100_003

    @on_rank
    def body(comm):
        x = values("float32", (count,), 64, comm.rank)
        return comm.allreduce(x, "sum"), comm.allreduce(x, "mean"), comm.reduce(x, 1, "sum")

    xs = [values("float32", (count,), 64, r) for r in range(world3plus.size)]
    assert_order_matters(xs, "100k float32")
    for rank, (total, mean, reduced) in enumerate(world3plus.run(body)):
        assert_bits(total, left_fold("sum", xs), f"rank {rank} sum")
        assert_bits(mean, left_fold("mean", xs), f"rank {rank} mean")
        if rank == 1:
            assert_bits(reduced, total, "reduce on root 1")


def test_the_parallel_path_gives_the_bits_of_the_small_path(world3plus):
    """The same elements reduced whole (in parallel) and in 16 kB pieces (by
    every rank) give the same bits: no reference needed."""
    count = 60_000

    @on_rank
    def body(comm):
        x = values("float32", (count,), 65, comm.rank)
        whole = {op: comm.allreduce(x, op) for op in float_ops("float32")}
        pieces = {op: np.concatenate([comm.allreduce(x[i:i + 4096], op) for i in range(0, count, 4096)])
                  for op in float_ops("float32")}
        return whole, pieces

    for rank, (whole, pieces) in enumerate(world3plus.run(body)):
        for op in whole:
            assert_bits(whole[op], pieces[op], f"rank {rank} {op}: parallel vs small path")


#: Members of World(4), in the sub-communicator's order (the key's): the
#: parallel fold writes into the slots of members 0 and 1.
GROUPS = {"world": [0, 1, 2, 3], "last three": [1, 2, 3], "uneven": [0, 1, 3], "descending": [2, 1, 0]}
#: The in-place fold's ops: rank 0 folds into member 1's part, which complex
#: prod reads after it writes its output.
IN_PLACE = (("float32", "sum"), ("float64", "mean"), ("complex64", "prod"))


@pytest.fixture(scope="module")
def world4(worlds):
    return worlds(4)


@pytest.mark.parametrize("group", GROUPS)
def test_slices_folded_in_place_give_the_left_fold_on_any_members(world4, group):
    """A parallel fold folds each slice in place, into member 0's or member
    1's slot, and every rank copies the folded slices from there. On the
    world and on sub-communicators of other members in other orders, with
    equal and unequal slices, small and large, allreduce and reduce give the
    left fold's bits."""
    members = GROUPS[group]
    size = len(members)
    # equal and unequal slices, copied out with the others' (up to 128 KiB) or by the fold
    counts = [size * 16 * 1000, size * 16 * 1000 + 5, size * 16 * 3000 + 5]

    @on_rank
    def body(comm):
        inside = comm.rank in members
        sub = comm.split(0 if inside else None, key=members.index(comm.rank) if inside else 0)
        if sub is None:
            return None
        out = {}
        for count in counts:
            for dtype, op in IN_PLACE:
                x = values(dtype, (count,), 68, sub.rank)
                out[count, dtype, op] = sub.allreduce(x, op), sub.reduce(x, root=size - 1, op=op)
        sub.free()
        return out

    results = world4.run(body)
    for count in counts:
        for dtype, op in IN_PLACE:
            xs = [values(dtype, (count,), 68, r) for r in range(size)]
            expected = left_fold(op, xs)
            for rank, world_rank in enumerate(members):
                total, reduced = results[world_rank][count, dtype, op]
                what = f"{group} rank {rank}, {op} of {count} {dtype}"
                assert_bits(total, expected, what + " by allreduce")
                if rank == size - 1:
                    assert_bits(reduced, expected, what + " by reduce")
                else:
                    assert reduced is None
    assert_order_matters([values("float32", (counts[0],), 68, r) for r in range(size)], group)


@pytest.mark.parametrize("dtype", INEXACT, ids=str)
def test_an_elements_reduction_does_not_depend_on_the_elements_around_it(world3plus, dtype):
    """The fold is element by element: element i of a reduction is the same
    whether it is reduced alone, in a 0-d array, or inside a longer array."""

    @on_rank
    def body(comm):
        x = values(dtype, (9,), 66, comm.rank)
        out = {}
        for op in float_ops(dtype):
            whole = comm.allreduce(x, op)
            alone = [comm.allreduce(x[i:i + 1], op) for i in range(9)]
            zero_d = [comm.allreduce(x[i], op) for i in range(9)]  # x[i] is a numpy scalar: 0-d
            out[op] = whole, alone, zero_d
        return out

    for rank, got in enumerate(world3plus.run(body)):
        for op, (whole, alone, zero_d) in got.items():
            for i in range(9):
                assert_bits(alone[i], whole[i:i + 1], f"rank {rank} {op} element {i} alone vs in the array")
                assert_bits(zero_d[i], np.asarray(whole[i]), f"rank {rank} {op} element {i} as 0-d vs in the array")


def test_float16_and_float32_sums_round_at_every_step_in_rank_order(world3plus):
    """Folded in the input dtype: 2048 + 1 is 2048 in float16, so a float16
    sum of [2048, 1, 1, ...] is 2048 while [1, 1, 2048] gives 2050."""

    def body(comm):
        n = comm.size
        first = np.float16(2048.0) if comm.rank == 0 else np.float16(1.0)
        last = np.float16(2048.0) if comm.rank == n - 1 else np.float16(1.0)
        f32 = np.float32(2.0**24) if comm.rank == 0 else np.float32(1.0)
        return (comm.allreduce(np.array([first, last]), "sum"),
                comm.allreduce(np.array([f32]), "sum"),
                comm.allreduce(np.full(40_000, first), "sum"))  # 80 kB: the parallel path

    n = world3plus.size
    for pair, single, big in world3plus.run(body):
        # 2048 + 1 rounds (to even) back to 2048; 1 + 1 + ... + 2048 is exact up to
        # 2050 and then rounds to even
        assert pair.tolist() == [2048.0, float(np.float16(2048 + n - 1))]
        assert single.tolist() == [2.0**24]
        assert_bits(big, np.full(40_000, 2048.0, np.float16), "float16 parallel path")


def test_results_are_identical_on_every_rank_and_in_every_run(world):
    @on_rank
    def body(comm):
        out = []
        for dtype in INEXACT:
            for count in (333, (SMALL // dtype.itemsize) + 99):
                x = values(dtype, (count,), 67, comm.rank)
                out += [comm.allreduce(x, op).tobytes() for op in float_ops(dtype)]
        return out

    first, second = world.run(body), world.run(body)
    assert first == second, "two runs gave different bits"
    assert all(r == first[0] for r in first), "ranks got different bits"


@on_rank
def _rank_start_method_program(comm):
    out = []
    for dtype, count in (("float32", 100_003), ("float64", 1001), ("float16", 50_001), ("complex64", 20_000)):
        x = values(dtype, (count,), 68, comm.rank)
        out.append(comm.allreduce(x, "sum"))
        out.append(comm.allreduce(x, "mean"))
        out.append(comm.reduce_scatter(values(dtype, (comm.size, 999), 69, comm.rank), "sum"))
    return out


@pytest.mark.parametrize("start_method", ["fork", pytest.param("forkserver", marks=pytest.mark.slow), pytest.param("spawn", marks=pytest.mark.slow)])
def test_results_are_identical_under_every_start_method(start_method):
    """forkserver and spawn re-import this module in the workers."""
    with simdist.World(3, timeout=TIMEOUT, start_method=start_method) as world:
        results = world.run(_rank_start_method_program)
    i = 0
    for dtype, count in (("float32", 100_003), ("float64", 1001), ("float16", 50_001), ("complex64", 20_000)):
        xs = [values(dtype, (count,), 68, r) for r in range(3)]
        bs = [values(dtype, (3, 999), 69, r) for r in range(3)]
        for rank, got in enumerate(results):
            what = f"{start_method}: rank {rank} {dtype}"
            assert_bits(got[i], left_fold("sum", xs), what + " sum")
            assert_bits(got[i + 1], left_fold("mean", xs), what + " mean")
            assert_bits(got[i + 2], left_fold("sum", [b[rank] for b in bs]), what + " reduce_scatter")
        i += 3


@pytest.mark.parametrize("order", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("slot_bytes", [None, 4096])
def test_named_orders_give_the_bits_of_that_algorithm_on_every_rank(order, slot_bytes):
    from simdist import _orders

    def program(comm):
        x = values("float32", (2, 1501), seed=7, rank=comm.rank)
        blocks = values("float32", (comm.size, 301), seed=8, rank=comm.rank)
        return x, blocks, comm.allreduce(x), comm.reduce(x, root=2, op="mean"), comm.reduce_scatter(blocks)

    with simdist.World(5, order=order, slot_bytes=slot_bytes, timeout=TIMEOUT) as world:
        results = world.run(program)
    xs = [r[0] for r in results]
    expected = _orders.in_order(order, "sum", xs)
    assert expected.tobytes() != left_fold("sum", xs).tobytes(), "the data must tell the orders apart"
    expected_blocks = _orders.in_order(order, "sum", [r[1] for r in results])
    for rank, (_, _, total, mean, block) in enumerate(results):
        assert_bits(total, expected, f"{order} allreduce on rank {rank}")
        assert (mean is None) == (rank != 2)
        assert_bits(block, expected_blocks[rank], f"{order} reduce_scatter on rank {rank}")
    assert_bits(results[2][3], _orders.in_order(order, "mean", xs), f"{order} mean")


def test_an_unknown_order_is_refused():
    with pytest.raises(simdist.InvalidValue, match="order='tree'"):
        simdist.World(2, order="tree")
