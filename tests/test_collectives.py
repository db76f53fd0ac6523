"""The semantics of the simulator's collectives, checked against numpy.

Each ``_rank_*`` function runs on every rank of a World. It builds its inputs
from ``(seed, rank)`` with :func:`values`, so the driver can rebuild every
rank's input and compute the reference with plain numpy. On the rank it checks
what pickling would hide (inputs left unchanged, results that are new arrays
owning their memory, no warning escaping); the driver compares the returned
results with the reference, to the bit.

Determinism of floating-point reductions (the parallel path, chunking, start
methods) is pinned in ``test_determinism.py``.
"""

from __future__ import annotations

import inspect
import os
import time

import numpy as np
import pytest

import simdist
from reference import LOGICAL, UFUNC, assert_bits, left_fold, on_rank, values

SIZES = (1, 2, 3, 4)
#: The fast tier runs every test on 2 and 3 ranks (an even and an odd world;
#: the per-dtype tests each dtype on one of them); the full suite adds 1 and 4.
FAST_SIZES = (2, 3)


def _sizes(sizes):
    return [n if n in FAST_SIZES else pytest.param(n, marks=pytest.mark.slow) for n in sizes]
TIMEOUT = 30.0

DTYPES = tuple(
    np.dtype(name)
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)
FLOATS = tuple(dt for dt in DTYPES if dt.kind == "f")

# Shapes every array collective must carry: 0-d, empty, odd, 2-D and 3-D.
SHAPES = ((), (0,), (3, 0), (1,), (7,), (4, 3), (2, 3, 5))
# Inner shapes for the collectives that take ``(size, ...)``.
BLOCK_SHAPES = ((), (0,), (5,), (3, 2), (2, 0, 3))


def ops_for(dtype) -> tuple[str, ...]:
    """The ops the contract defines on ``dtype`` (Communicator docstring)."""
    kind = np.dtype(dtype).kind
    ops = []
    if kind in "iufc":
        ops += ["sum", "prod"]
    if kind in "fc":
        ops.append("mean")
    if kind in "biuf":
        ops += ["min", "max"]
    if kind in "biu":
        ops += ["band", "bor", "bxor", "land", "lor", "lxor"]
    return tuple(ops)


def dtype_id(dt) -> str:
    return np.dtype(dt).name


# -- inputs and references -------------------------------------------------------


# -- helpers that run on the ranks ------------------------------------------------


def checked(call, *inputs):
    """``call(*inputs)`` on a rank, asserting that the inputs are unchanged and
    that an array result is a new ndarray owning its memory."""
    before = [(x.dtype, x.shape, x.strides, x.tobytes()) for x in inputs]
    result = call(*inputs)
    after = [(x.dtype, x.shape, x.strides, x.tobytes()) for x in inputs]
    assert before == after, "a collective modified its input"
    if result is not None:
        assert type(result) is np.ndarray, f"result is a {type(result).__name__}, not an ndarray"
        assert result.flags.owndata, f"result of shape {result.shape} does not own its memory"
        for x in inputs:
            assert not np.may_share_memory(result, x), "result shares memory with the input"
    return result


# -- worlds -------------------------------------------------------------------


class _Worlds:
    """Worlds shared by the tests of this module, created on first use and
    closed when the module is done."""

    def __init__(self):
        self._open = {}

    def get(self, size, **options) -> simdist.World:
        key = (size, tuple(sorted(options.items())))
        world = self._open.get(key)
        if world is None:
            world = self._open[key] = simdist.World(size, timeout=TIMEOUT, **options)
        return world

    def close(self):
        for world in self._open.values():
            world.close()


# Every world fixture is module-scoped, so that worlds start before (and close
# after) the per-test leak guard of conftest.py looks at the processes.


@pytest.fixture(scope="module")
def worlds():
    cache = _Worlds()
    yield cache
    cache.close()


@pytest.fixture(scope="module", params=_sizes(SIZES), ids=lambda n: f"size{n}")
def world(request, worlds):
    return worlds.get(request.param)


@pytest.fixture(scope="module", params=_sizes(SIZES[1:]), ids=lambda n: f"size{n}")
def p2p_world(request, worlds):
    """Worlds with at least two ranks (the contract says nothing of sending to oneself)."""
    return worlds.get(request.param)


@pytest.fixture(scope="module", params=_sizes(SIZES), ids=lambda n: f"chunked-size{n}")
def chunked_world(request, worlds):
    """Worlds whose 4 KiB slots cut every message below into many chunks."""
    return worlds.get(request.param, slot_bytes=4096)


@pytest.fixture(scope="module")
def world4(worlds):
    return worlds.get(4)


def every_dtype(fn):
    """Every dtype on every size; in the fast tier each dtype on one of
    ``FAST_SIZES`` (alternately), so that it still sees every dtype and
    both an even and an odd world."""
    fixture = "p2p_world" if "p2p_world" in inspect.signature(fn).parameters else "world"
    sizes = SIZES[1:] if fixture == "p2p_world" else SIZES
    cases = [
        pytest.param(n, dtype, id=f"size{n}-{dtype_id(dtype)}",
                     marks=() if n == FAST_SIZES[i % len(FAST_SIZES)] else pytest.mark.slow)
        for n in sizes for i, dtype in enumerate(DTYPES)
    ]
    return pytest.mark.parametrize(f"{fixture}, dtype", cases, indirect=[fixture])(fn)


# -- reductions ---------------------------------------------------------------


@on_rank
def _rank_reductions(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        x = values(dtype, shape, seed, comm.rank)
        for op in ops_for(dtype):
            out.append(("allreduce", shape, op, None, checked(lambda a: comm.allreduce(a, op), x)))
            for root in range(comm.size):
                r = checked(lambda a: comm.reduce(a, root=root, op=op), x)
                out.append(("reduce", shape, op, root, r))
    return out


@every_dtype
def test_allreduce_and_reduce_equal_the_left_fold_for_every_op_and_shape(world, dtype):
    seed = 11
    results = world.run(_rank_reductions, dtype, SHAPES, seed)
    for rank, got in enumerate(results):
        assert len(got) == len(SHAPES) * len(ops_for(dtype)) * (1 + world.size)
        for kind, shape, op, root, r in got:
            expected = left_fold(op, [values(dtype, shape, seed, j) for j in range(world.size)])
            what = f"rank {rank} {kind}(op={op}, root={root}) of {dtype} {shape}"
            if kind == "reduce" and root != rank:
                assert r is None, f"{what}: non-root got {r!r}"
            else:
                assert_bits(r, expected, what)


@on_rank
def _rank_reduce_scatter(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        x = values(dtype, (comm.size, *shape), seed, comm.rank)
        for op in ops_for(dtype):
            mine = checked(lambda a: comm.reduce_scatter(a, op), x)
            whole = comm.allreduce(x, op)
            out.append((shape, op, mine, whole[comm.rank]))
    return out


@every_dtype
def test_reduce_scatter_gives_each_rank_the_fold_of_its_block(world, dtype):
    seed = 12
    results = world.run(_rank_reduce_scatter, dtype, BLOCK_SHAPES, seed)
    for rank, got in enumerate(results):
        for shape, op, mine, block in got:
            xs = [values(dtype, (world.size, *shape), seed, j) for j in range(world.size)]
            what = f"rank {rank} reduce_scatter(op={op}) of {dtype} {shape}"
            assert_bits(mine, left_fold(op, [x[rank] for x in xs]), what)
            assert_bits(mine, np.asarray(block), what + " vs its block of allreduce")


def test_allreduce_mean_divides_by_world_size(world):
    def body(comm):
        x = np.full(5, float(comm.rank + 1))
        z = np.array([complex(comm.rank, -3.0 * comm.rank)], np.complex64)
        return comm.allreduce(x, "mean"), comm.allreduce(z, "mean"), comm.allreduce(x, "sum")

    n = world.size
    for mean, cmean, total in world.run(body):
        np.testing.assert_array_equal(total, np.full(5, n * (n + 1) / 2))
        np.testing.assert_array_equal(mean, np.full(5, (n + 1) / 2))
        expected = np.array([complex(n * (n - 1) / 2 / n, -3.0 * n * (n - 1) / 2 / n)], np.complex64)
        assert_bits(cmean, expected, "complex mean")


def test_allreduce_and_reduce_default_to_sum(world):
    def body(comm):
        x = np.arange(4, dtype=np.int32) * (comm.rank + 1)
        return comm.allreduce(x), comm.reduce(x), comm.reduce_scatter(np.ones((comm.size, 2), np.int64))

    n = world.size
    results = world.run(body)
    for rank, (all_, root0, blocks) in enumerate(results):
        assert_bits(all_, np.arange(4, dtype=np.int32) * (n * (n + 1) // 2), "allreduce default op")
        if rank == 0:
            assert_bits(root0, all_, "reduce default op and root")
        else:
            assert root0 is None
        assert_bits(blocks, np.full(2, n, np.int64), "reduce_scatter default op")


@pytest.mark.parametrize("dtype", [dt for dt in DTYPES if dt.kind in "iu"], ids=dtype_id)
def test_logical_ops_on_integers_give_zero_or_one_in_the_input_dtype(world, dtype):
    def body(comm):
        x = np.array([0, 5, 0, 7, 3], dtype) if comm.rank % 2 else np.array([0, 0, 9, 1, 2], dtype)
        return {op: comm.allreduce(x, op) for op in LOGICAL}

    even = np.array([0, 0, 1, 1, 1], bool)  # the truth values of even ranks' inputs
    odd = np.array([0, 1, 0, 1, 1], bool)  # of odd ranks'
    truths = [odd if r % 2 else even for r in range(world.size)]
    for got in world.run(body):
        for op in LOGICAL:
            expected = truths[0]
            for t in truths[1:]:
                expected = UFUNC[op](expected, t)
            assert_bits(got[op], expected.astype(dtype), f"{op} on {dtype}")
            assert set(np.unique(got[op]).tolist()) <= {0, 1}


# -- NaN, Inf and floating-point exceptions -------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_sum_of_opposite_infinities_is_nan(p2p_world, dtype):
    def body(comm):
        x = np.array([np.inf, 1.0, np.inf, 0.0], dtype)
        if comm.rank == 1:
            x = np.array([-np.inf, -np.inf, np.inf, np.inf], dtype)
        return comm.allreduce(x, "sum"), comm.allreduce(x, "mean"), comm.allreduce(x, "prod")

    for total, mean, prod in p2p_world.run(on_rank(body)):
        assert total.dtype == mean.dtype == prod.dtype == dtype
        assert np.isnan(total[0]) and total[1] == -np.inf and total[2] == np.inf and total[3] == np.inf
        assert np.isnan(mean[0]) and mean[1] == -np.inf and mean[2] == np.inf and mean[3] == np.inf
        assert prod[0] == -np.inf and np.isnan(prod[3]), "0 * inf is nan"


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize("op", ["min", "max", "sum", "prod", "mean"])
def test_nan_on_any_rank_propagates_through_every_float_op(world, dtype, op):
    def body(comm):
        x = np.arange(1, comm.size + 2, dtype=dtype)
        x[comm.rank] = np.nan  # element r is nan on rank r only
        return comm.allreduce(x, op)

    for got in world.run(body):
        assert np.isnan(got[: world.size]).all(), f"{op} lost a nan: {got}"
        assert not np.isnan(got[world.size]), f"{op} made a nan out of numbers: {got}"


def _exceptional_inputs(size):
    """Inputs whose folds overflow, divide infinities or wrap around."""
    big16 = np.array([60000.0, -60000.0, np.inf, 1e-7], np.float16)
    huge = np.array([np.finfo(np.float64).max, np.inf, -np.inf, 0.0])
    z = np.array([complex(np.inf, 1.0), complex(1e308, -1e308)], np.complex128)
    ints = np.array([np.iinfo(np.int8).max, np.iinfo(np.int8).min], np.int8)
    top = np.array([np.iinfo(np.uint64).max], np.uint64)
    return [(big16, "sum"), (big16, "prod"), (big16, "mean"), (huge, "sum"), (huge, "prod"),
            (huge, "mean"), (z, "sum"), (z, "prod"), (z, "mean"), (ints, "sum"), (ints, "prod"),
            (top, "sum"), (top, "prod")]


@pytest.mark.parametrize("errstate", ["warn", "raise"])
def test_overflow_and_invalid_operations_warn_nothing_and_raise_nothing(world, errstate):
    """IEEE 754 semantics: overflow gives inf, inf - inf gives nan, integers wrap;
    neither a RuntimeWarning nor a FloatingPointError escapes the collective."""

    @on_rank
    def body(comm):
        out = []
        with np.errstate(all=errstate):
            for x, op in _exceptional_inputs(comm.size):
                out.append(comm.allreduce(x, op))
                out.append(comm.reduce_scatter(np.stack([x] * comm.size), op))
        return out

    inputs = _exceptional_inputs(world.size)
    for got in world.run(body):
        for i, (x, op) in enumerate(inputs):
            expected = left_fold(op, [x] * world.size)
            assert_bits(got[2 * i], expected, f"allreduce {op} of {x}")
            assert_bits(got[2 * i + 1], expected, f"reduce_scatter {op} of {x}")


# -- shapes, layouts and conversions -------------------------------------------------


def _layouts(dtype, shape, seed, rank):
    """The same logical array five ways: contiguous, transposed, strided,
    reversed and read-only (the last two also non-contiguous)."""
    base = values(dtype, shape, seed, rank)
    out = {"contiguous": base.copy()}
    out["fortran"] = np.asfortranarray(base)
    t = np.empty(shape[::-1], dtype)
    t[...] = base.T
    out["transposed"] = t.T
    s = np.zeros((2 * shape[0], *shape[1:]), dtype)
    s[::2] = base
    out["strided"] = s[::2]
    r = np.ascontiguousarray(base[::-1])
    out["reversed"] = r[::-1]
    ro = s.copy()[::2]
    ro.flags.writeable = False
    out["read-only-strided"] = ro
    frozen = base.copy()
    frozen.flags.writeable = False
    out["read-only"] = frozen
    return out


@on_rank
def _rank_layouts(comm, dtype, shape, seed):
    size, me = comm.size, comm.rank
    results = {}
    for name, x in _layouts(dtype, shape, seed, me).items():
        xb = _layouts(dtype, (size, *shape[1:]), seed + 1, me)[name]
        got = {
            "allreduce": checked(lambda a: comm.allreduce(a, ops_for(dtype)[0]), x),
            "reduce": checked(lambda a: comm.reduce(a, root=size - 1, op=ops_for(dtype)[-1]), x),
            "broadcast": checked(lambda a: comm.broadcast(a, root=size - 1), x),
            "allgather": checked(comm.allgather, x),
            "gather": checked(lambda a: comm.gather(a, root=0), x),
            "scatter": checked(lambda a: comm.scatter(a, root=size - 1), xb),
            "reduce_scatter": checked(lambda a: comm.reduce_scatter(a, ops_for(dtype)[0]), xb),
            "alltoall": checked(comm.alltoall, xb),
        }
        if size > 1:
            dest, source = (me + 1) % size, (me - 1) % size
            if me == 0:
                checked(lambda a: comm.send(a, dest, tag=3), x)
                got["recv"] = checked(lambda: comm.recv(source, tag=3))
            else:
                got["recv"] = checked(lambda: comm.recv(source, tag=3))
                checked(lambda a: comm.send(a, dest, tag=3), x)
        results[name] = got
    return results


@pytest.mark.parametrize("dtype", ["int16", "float32", "complex128", "bool"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 2), (5,)], ids=str)
def test_every_collective_accepts_non_contiguous_and_read_only_inputs(world, dtype, shape):
    dtype = np.dtype(dtype)
    seed = 21
    size = world.size
    results = world.run(_rank_layouts, dtype, shape, seed)
    xs = [values(dtype, shape, seed, j) for j in range(size)]
    xbs = [values(dtype, (size, *shape[1:]), seed + 1, j) for j in range(size)]
    for rank, per_layout in enumerate(results):
        assert set(per_layout) == {"contiguous", "fortran", "transposed", "strided", "reversed",
                                   "read-only-strided", "read-only"}
        for name, got in per_layout.items():
            what = f"rank {rank}, {name} {dtype} {shape}"
            assert_bits(got["allreduce"], left_fold(ops_for(dtype)[0], xs), what + " allreduce")
            if rank == size - 1:
                assert_bits(got["reduce"], left_fold(ops_for(dtype)[-1], xs), what + " reduce")
            assert_bits(got["broadcast"], xs[size - 1], what + " broadcast")
            assert_bits(got["allgather"], np.stack(xs), what + " allgather")
            if rank == 0:
                assert_bits(got["gather"], np.stack(xs), what + " gather")
            assert_bits(got["scatter"], xbs[size - 1][rank], what + " scatter")
            assert_bits(got["reduce_scatter"], left_fold(ops_for(dtype)[0], [x[rank] for x in xbs]),
                        what + " reduce_scatter")
            assert_bits(got["alltoall"], np.stack([x[rank] for x in xbs]), what + " alltoall")
            if size > 1:
                assert_bits(got["recv"], xs[(rank - 1) % size], what + " recv")


@every_dtype
def test_zero_d_inputs_give_zero_d_arrays(world, dtype):
    @on_rank
    def body(comm):
        x = values(dtype, (), 5, comm.rank)
        op = ops_for(dtype)[0]
        return [
            checked(lambda a: comm.allreduce(a, op), x),
            checked(lambda a: comm.reduce(a, 0, op), x),
            checked(lambda a: comm.broadcast(a, 0), x),
            checked(lambda a: comm.scatter(a, 0), values(dtype, (comm.size,), 6, comm.rank)),
            checked(lambda a: comm.reduce_scatter(a, op), values(dtype, (comm.size,), 7, comm.rank)),
            checked(comm.allgather, x),
        ]

    for rank, (ar, red, bc, sc, rs, ag) in enumerate(world.run(body)):
        for r in (ar, bc, sc, rs) + ((red,) if rank == 0 else ()):
            assert type(r) is np.ndarray and r.shape == () and r.dtype == dtype
        assert ag.shape == (world.size,)


EMPTY_SHAPES = ((0,), (3, 0), (0, 4), (2, 0, 3))


@every_dtype
def test_empty_inputs_give_empty_arrays_of_the_same_shape(world, dtype):
    @on_rank
    def body(comm):
        out = []
        for shape in EMPTY_SHAPES:
            x = np.zeros(shape, dtype)
            blocks = np.zeros((comm.size, *shape), dtype)
            for op in ops_for(dtype):
                out.append(("allreduce", shape, checked(lambda a: comm.allreduce(a, op), x)))
                out.append(("reduce_scatter", shape, checked(lambda a: comm.reduce_scatter(a, op), blocks)))
            out.append(("broadcast", shape, comm.broadcast(x if comm.rank == 0 else None)))
            out.append(("scatter", shape, comm.scatter(blocks if comm.rank == 0 else None)))
            out.append(("alltoall", (comm.size, *shape), checked(comm.alltoall, blocks)))
            out.append(("allgather", (comm.size, *shape), checked(comm.allgather, x)))
        return out

    for got in world.run(body):
        assert len(got) == len(EMPTY_SHAPES) * (2 * len(ops_for(dtype)) + 4)
        for kind, shape, r in got:
            assert type(r) is np.ndarray and r.shape == shape and r.dtype == dtype, (kind, shape, r)


def test_non_array_inputs_are_converted_with_asarray(world):
    def body(comm):
        return (
            comm.allreduce([1, 2, 3]),
            comm.allreduce(2.5, "max"),
            comm.allreduce(True, "land"),
            comm.allgather(np.float32(comm.rank)),
            comm.broadcast([[1.5, 2.5]] if comm.rank == 0 else None),
        )

    n = world.size
    for ints, fmax, flag, gathered, bc in world.run(body):
        assert_bits(ints, np.asarray([1, 2, 3]) * n, "list")
        assert_bits(fmax, np.asarray(2.5), "python float")
        assert_bits(flag, np.asarray(True), "python bool")
        assert_bits(gathered, np.arange(n, dtype=np.float32), "numpy scalar")
        assert_bits(bc, np.asarray([[1.5, 2.5]]), "nested list")


# -- data movement ---------------------------------------------------------------


@on_rank
def _rank_broadcasts(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        for root in range(comm.size):
            x = values(dtype, shape, seed, comm.rank)
            if comm.rank == root:  # twice, as the non-roots call twice
                out.append((shape, root, "root", checked(lambda a: comm.broadcast(a, root=root), x)))
                out.append((shape, root, "root", checked(lambda a: comm.broadcast(a, root=root), x)))
            else:
                r = comm.broadcast(None, root=root)
                assert r.flags.owndata
                out.append((shape, root, "none", r))
                out.append((shape, root, "array", checked(lambda a: comm.broadcast(a, root=root), x)))
    return out


@every_dtype
def test_broadcast_gives_every_rank_a_copy_of_roots_array(world, dtype):
    seed = 31
    for rank, got in enumerate(world.run(_rank_broadcasts, dtype, SHAPES, seed)):
        for shape, root, passed, r in got:
            assert (passed == "root") == (rank == root)
            assert_bits(r, values(dtype, shape, seed, root), f"rank {rank} broadcast root={root} passed {passed}")


@on_rank
def _rank_broadcasts_from(comm):
    out = []
    for n in (8, 3 << 20):  # within half a slot, and larger
        for root in range(comm.size):
            x = values(np.float64, (n,), 5, comm.rank)
            got = comm.broadcast_from(x if comm.rank == root else None, root)
            out.append((n, root, None if got is None else got.sum()))
    return out


def test_broadcast_from_spares_the_root_a_copy_of_a_large_array(world):
    """The root of a broadcast larger than half a slot gets None back
    (the simulated mpi4py sends large user-op elements in turn with it);
    the others get the root's array, as from broadcast."""
    for rank, got in enumerate(world.run(_rank_broadcasts_from)):
        for n, root, total in got:
            if rank == root and n > 8:
                assert total is None
            else:
                assert total == values(np.float64, (n,), 5, root).sum(), (rank, n, root)


@on_rank
def _rank_gathers(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        x = values(dtype, shape, seed, comm.rank)
        out.append((shape, "allgather", None, checked(comm.allgather, x)))
        for root in range(comm.size):
            out.append((shape, "gather", root, checked(lambda a: comm.gather(a, root=root), x)))
    return out


@every_dtype
def test_allgather_and_gather_stack_every_rank_in_rank_order(world, dtype):
    seed = 32
    for rank, got in enumerate(world.run(_rank_gathers, dtype, SHAPES, seed)):
        for shape, kind, root, r in got:
            expected = np.stack([values(dtype, shape, seed, j) for j in range(world.size)])
            what = f"rank {rank} {kind}(root={root}) of {dtype} {shape}"
            if kind == "gather" and root != rank:
                assert r is None, what
            else:
                assert r.shape == (world.size, *shape)
                assert_bits(r, expected, what)


def test_allgather_equals_gather_on_the_root(world):
    def body(comm):
        x = values("float64", (3, 2), 33, comm.rank)
        return comm.allgather(x), [comm.gather(x, root) for root in range(comm.size)]

    for rank, (ag, gathered) in enumerate(world.run(body)):
        assert_bits(gathered[rank], ag, "gather on root vs allgather")
        assert all(g is None for r, g in enumerate(gathered) if r != rank)


@on_rank
def _rank_scatters(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        for root in range(comm.size):
            x = values(dtype, (comm.size, *shape), seed, comm.rank)
            if comm.rank == root:  # twice, as the non-roots call twice
                out.append((shape, root, checked(lambda a: comm.scatter(a, root=root), x)))
                out.append((shape, root, checked(lambda a: comm.scatter(a, root=root), x)))
            else:
                r = comm.scatter(None, root=root)
                assert r.flags.owndata
                out.append((shape, root, r))
                # a non-root may pass an array of root's dtype and shape; it is ignored
                out.append((shape, root, checked(lambda a: comm.scatter(a, root=root), x)))
    return out


@every_dtype
def test_scatter_gives_rank_r_block_r_of_roots_array(world, dtype):
    seed = 34
    for rank, got in enumerate(world.run(_rank_scatters, dtype, BLOCK_SHAPES, seed)):
        for shape, root, r in got:
            expected = values(dtype, (world.size, *shape), seed, root)[rank]
            assert_bits(r, np.asarray(expected), f"rank {rank} scatter root={root} {dtype} {shape}")


@on_rank
def _rank_alltoalls(comm, dtype, shapes, seed):
    out = []
    for shape in shapes:
        x = values(dtype, (comm.size, *shape), seed, comm.rank)
        once = checked(comm.alltoall, x)
        twice = checked(comm.alltoall, once)
        out.append((shape, once, twice))
    return out


@every_dtype
def test_alltoall_gives_out_j_equal_to_x_j_r_and_twice_is_the_identity(world, dtype):
    seed = 35
    for rank, got in enumerate(world.run(_rank_alltoalls, dtype, BLOCK_SHAPES, seed)):
        for shape, once, twice in got:
            xs = [values(dtype, (world.size, *shape), seed, j) for j in range(world.size)]
            assert_bits(once, np.stack([x[rank] for x in xs]), f"rank {rank} alltoall {dtype} {shape}")
            assert_bits(twice, xs[rank], f"rank {rank} alltoall twice {dtype} {shape}")


def test_scatter_then_gather_is_the_identity(world):
    @on_rank
    def body(comm):
        out = []
        for root in range(comm.size):
            x = values("complex64", (comm.size, 4, 3), 36, root) if comm.rank == root else None
            out.append(comm.gather(comm.scatter(x, root), root))
        return out

    for rank, got in enumerate(world.run(body)):
        for root, g in enumerate(got):
            if rank == root:
                assert_bits(g, values("complex64", (world.size, 4, 3), 36, root), f"root {root}")
            else:
                assert g is None


def test_barrier_returns_only_once_every_rank_has_called_it(world, tmp_path):
    def body(comm, path, rounds):
        seen = []
        for i in range(rounds):
            if comm.rank == i % comm.size:
                time.sleep(0.02)  # make this rank the last to arrive
            open(os.path.join(path, f"{i}-{comm.rank}"), "w").close()
            comm.barrier()
            seen.append(sum(name.startswith(f"{i}-") for name in os.listdir(path)))
        assert comm.barrier() is None
        return seen

    rounds = 2 * world.size
    for seen in world.run(body, str(tmp_path), rounds):
        assert seen == [world.size] * rounds


@pytest.mark.parametrize("dtype", ["float32", "complex128", "uint8", "bool"])
def test_chunked_collectives_carry_messages_many_slots_long(chunked_world, dtype):
    """4 KiB slots: a 3-D array of ~10k elements crosses every collective in many
    chunks, of an odd element count so that the last chunk is partial."""
    dtype = np.dtype(dtype)
    shape = (7, 13, 111)
    seed = 37

    @on_rank
    def body(comm):
        n, me = comm.size, comm.rank
        x = values(dtype, shape, seed, me)
        xb = values(dtype, (n, 13, 111), seed + 1, me)
        op = ops_for(dtype)[0]
        return {
            "allreduce": checked(lambda a: comm.allreduce(a, op), x),
            "reduce": checked(lambda a: comm.reduce(a, n - 1, op), x[:, ::2]),
            "broadcast": checked(lambda a: comm.broadcast(a, n - 1), x) if me == n - 1 else comm.broadcast(None, n - 1),
            "allgather": checked(comm.allgather, x),
            "gather": checked(lambda a: comm.gather(a, 0), x.T),
            "scatter": checked(lambda a: comm.scatter(a, 0), xb),
            "reduce_scatter": checked(lambda a: comm.reduce_scatter(a, op), xb),
            "alltoall": checked(comm.alltoall, xb),
        }

    n = chunked_world.size
    op = ops_for(dtype)[0]
    xs = [values(dtype, shape, seed, j) for j in range(n)]
    xbs = [values(dtype, (n, 13, 111), seed + 1, j) for j in range(n)]
    for rank, got in enumerate(chunked_world.run(body)):
        assert_bits(got["allreduce"], left_fold(op, xs), "allreduce")
        if rank == n - 1:
            assert_bits(got["reduce"], left_fold(op, [x[:, ::2] for x in xs]), "reduce")
        assert_bits(got["broadcast"], xs[n - 1], "broadcast")
        assert_bits(got["allgather"], np.stack(xs), "allgather")
        if rank == 0:
            assert_bits(got["gather"], np.stack([x.T for x in xs]), "gather")
        assert_bits(got["scatter"], xbs[0][rank], "scatter")
        assert_bits(got["reduce_scatter"], left_fold(op, [x[rank] for x in xbs]), "reduce_scatter")
        assert_bits(got["alltoall"], np.stack([x[rank] for x in xbs]), "alltoall")


# -- point to point ---------------------------------------------------------------


@on_rank
def _rank_every_pair(comm, dtype, shapes, seed):
    """Every ordered pair exchanges one message per shape, in one global order
    (so no send waits on a rank that waits on something else)."""
    size, me = comm.size, comm.rank
    got = []
    for src in range(size):
        for dst in range(size):
            if src == dst:
                continue
            for tag, shape in enumerate(shapes):
                if me == src:
                    x = values(dtype, shape, seed + tag, src * size + dst)
                    assert checked(lambda a: comm.send(a, dst, tag=tag), x) is None
                elif me == dst:
                    got.append((src, tag, checked(lambda: comm.recv(src, tag=tag))))
    return got


@every_dtype
def test_recv_returns_a_new_array_with_the_senders_dtype_shape_and_bits(p2p_world, dtype):
    seed = 41
    size = p2p_world.size
    shapes = SHAPES + ((5000,),)
    for dst, got in enumerate(p2p_world.run(_rank_every_pair, dtype, shapes, seed)):
        assert len(got) == (size - 1) * len(shapes)
        for src, tag, r in got:
            expected = values(dtype, shapes[tag], seed + tag, src * size + dst)
            assert_bits(r, expected, f"{src} -> {dst} tag {tag}")


def test_messages_between_a_pair_with_one_tag_arrive_in_the_order_sent(p2p_world):
    def body(comm, count):
        last = comm.size - 1
        if comm.rank == 0:
            for i in range(count):
                comm.send(np.full(i % 5, i, np.int64), last, tag=7)
                comm.send(np.array(-i), last, tag=8)
        elif comm.rank == last:
            tag7 = [comm.recv(0, tag=7) for _ in range(count)]
            tag8 = [comm.recv(0, tag=8) for _ in range(count)]
            return [a.tolist() for a in tag7], [int(b) for b in tag8]

    count = 50
    got = p2p_world.run(body, count)[-1]
    assert got[0] == [[i] * (i % 5) for i in range(count)]
    assert got[1] == [-i for i in range(count)]


def test_recv_matches_tags_out_of_order(p2p_world):
    tags = [0, 3, 1, 2**40, 2, 9]

    def body(comm):
        if comm.rank == 1:
            for t in tags:
                comm.send(np.array([t, t], np.int64), 0, tag=t)
        elif comm.rank == 0:
            return {t: comm.recv(1, tag=t).tolist() for t in reversed(tags)}

    got = p2p_world.run(body)[0]
    assert got == {t: [t, t] for t in tags}


def test_recv_takes_messages_from_the_named_source_only(p2p_world):
    def body(comm):
        if comm.rank == 0:
            return [int(comm.recv(src)) for src in reversed(range(1, comm.size)) for _ in range(3)]
        for i in range(3):
            comm.send(np.array(100 * comm.rank + i), 0)

    n = p2p_world.size
    assert p2p_world.run(body)[0] == [100 * src + i for src in reversed(range(1, n)) for i in range(3)]


def test_send_sends_a_copy_so_later_changes_do_not_reach_the_receiver(p2p_world):
    def body(comm):
        if comm.rank == 0:
            x = np.arange(6.0)
            comm.send(x, 1)
            x[:] = -1.0
            comm.send(x, 1)
        elif comm.rank == 1:
            time.sleep(0.02)
            return comm.recv(0).tolist(), comm.recv(0).tolist()

    assert p2p_world.run(body)[1] == ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [-1.0] * 6)


@pytest.mark.parametrize("dtype", ["float64", "bool", "int8"])
def test_messages_larger_than_the_ring_arrive_when_the_receiver_posts_recv_late(p2p_world, dtype):
    """4 MB and more, much larger than a pair's ring (at most 1 MiB): the sender
    streams the message while the receiver copies it out."""
    dtype = np.dtype(dtype)
    count = (4 << 20) // dtype.itemsize + 3  # an odd byte count for bool and int8

    @on_rank
    def body(comm):
        last = comm.size - 1
        if comm.rank == 0:
            comm.send(values(dtype, (count,), 42), last, tag=1)
            comm.send(np.array(5, np.int16), last, tag=2)  # aligned after an odd-sized payload?
            comm.send(values(dtype, (count,), 43).reshape(-1, 1)[::2], last, tag=1)
            return None
        if comm.rank == last:
            time.sleep(0.1)  # the receiver posts its recv well after the send began
            big = checked(lambda: comm.recv(0, tag=1))
            small = comm.recv(0, tag=2)
            strided = comm.recv(0, tag=1)
            return big, small, strided

    big, small, strided = p2p_world.run(body)[-1]
    assert_bits(big, values(dtype, (count,), 42), "first large message")
    assert_bits(small, np.array(5, np.int16), "message after a large one")
    assert_bits(strided, np.asarray(values(dtype, (count,), 43).reshape(-1, 1)[::2]), "strided message")


def test_messages_with_odd_byte_counts_keep_the_stream_aligned(p2p_world):
    def body(comm):
        if comm.rank == 0:
            for i in range(1, 40):
                comm.send(np.arange(i, dtype=np.uint8), 1, tag=i % 3)
        elif comm.rank == 1:
            return [comm.recv(0, tag=i % 3).tolist() for i in range(1, 40)]

    assert p2p_world.run(body)[1] == [list(range(i)) for i in range(1, 40)]


# -- split and free ---------------------------------------------------------------


def split_groups(colors, keys) -> dict[int, list[int]]:
    """MPI_Comm_split: ranks of one color, ordered by key then by parent rank."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for rank, (color, key) in enumerate(zip(colors, keys)):
        if color is not None:
            groups.setdefault(color, []).append((key, rank))
    return {c: [r for _, r in sorted(g)] for c, g in groups.items()}


@on_rank
def _rank_split_layouts(comm, cases):
    out = []
    for colors, keys in cases:
        sub = comm.split(colors[comm.rank], key=keys[comm.rank])
        if sub is None:
            out.append(None)
            continue
        members = sub.allgather(np.array(comm.rank)).tolist()
        out.append((sub.rank, sub.size, members))
        sub.free()
    return out


def test_split_orders_ranks_by_key_then_by_parent_rank(world):
    n = world.size
    rng = np.random.default_rng(51)
    cases = [([0] * n, [0] * n), ([0] * n, [-r for r in range(n)]), ([r % 2 for r in range(n)], [0] * n),
             ([5] * n, [1 - r % 2 for r in range(n)]), ([r for r in range(n)], [0] * n)]
    for _ in range(12):
        colors = [None if c == 3 else int(c) for c in rng.integers(0, 4, n)]
        keys = [int(k) for k in rng.integers(-2, 3, n)]
        cases.append((colors, keys))
    results = world.run(_rank_split_layouts, cases)
    for i, (colors, keys) in enumerate(cases):
        groups = split_groups(colors, keys)
        for rank in range(n):
            got = results[rank][i]
            if colors[rank] is None:
                assert got is None, f"case {i}: color None must give None"
                continue
            members = groups[colors[rank]]
            assert got == (members.index(rank), len(members), members), f"case {i}: colors {colors} keys {keys}"


def test_split_with_color_none_gives_none_and_the_others_a_communicator(world):
    def body(comm):
        sub = comm.split(None if comm.rank == 0 else 1)
        if sub is None:
            return None
        return sub.size, int(sub.allreduce(np.array(comm.rank)))

    n = world.size
    results = world.run(body)
    assert results[0] is None
    assert results[1:] == [(n - 1, n * (n - 1) // 2)] * (n - 1)


def test_subcommunicator_reductions_fold_in_their_own_rank_order(world4):
    """A 3-rank sub-communicator ordered opposite to the world: its sums are the
    fold in sub-rank order, bit for bit, on the small and the parallel path."""
    world = world4
    colors, keys = [0, 0, 0, 1], [2, 0, 1, 0]
    order = split_groups(colors, keys)[0]  # parent ranks in sub-rank order: [1, 2, 0]

    @on_rank
    def body(comm, counts):
        sub = comm.split(colors[comm.rank], keys[comm.rank])
        if sub.size == 1:  # world rank 3, alone in its color
            return []
        out = []
        for count in counts:
            x = values("float32", (count,), 52, comm.rank)
            out.append(sub.allreduce(x, "sum"))
            out.append(sub.reduce(x, root=2, op="mean"))
            out.append(sub.reduce_scatter(values("float64", (sub.size, count // 8), 53, comm.rank), "sum"))
            out.append(sub.allgather(np.array(comm.rank)))
        return out

    counts = [999, 100_003]  # small path; parallel path (400 kB > 64 KiB on 3 ranks)
    results = world.run(body, counts)
    for parent in order:
        sub_rank = order.index(parent)
        got = iter(results[parent])
        for count in counts:
            xs = [values("float32", (count,), 52, p) for p in order]
            total = next(got)
            assert_bits(total, left_fold("sum", xs), f"sub-rank {sub_rank} sum of {count}")
            assert total.tobytes() != left_fold("sum", [values("float32", (count,), 52, p) for p in (0, 1, 2)]).tobytes(), \
                "the data must tell the two orders apart"
            mean = next(got)
            if sub_rank == 2:
                assert_bits(mean, left_fold("mean", xs), "sub mean on sub-root 2")
            else:
                assert mean is None
            blocks = [values("float64", (3, count // 8), 53, p) for p in order]
            assert_bits(next(got), left_fold("sum", [b[sub_rank] for b in blocks]), "sub reduce_scatter")
            assert next(got).tolist() == order


def test_subcommunicators_run_collectives_concurrently(world4):
    """Ranks {0, 1} run many collectives on their sub-communicator while rank 3
    waits in one on the other, which rank 2 joins only after rank 0 has sent it
    the result of the first group's work."""
    world = world4

    @on_rank
    def body(comm):
        sub = comm.split(comm.rank // 2, key=-comm.rank)
        if comm.rank < 2:
            acc = np.zeros(3)
            for i in range(40):
                acc = sub.allreduce(acc + i * comm.rank + 1.0, "sum")
                sub.broadcast(acc if sub.rank == 1 else None, root=1)
            if comm.rank == 0:
                comm.send(acc, 2, tag=4)
            return acc
        if comm.rank == 2:
            acc = comm.recv(0, tag=4)
            return sub.allgather(acc)
        return sub.allgather(np.full(3, -1.0))

    results = world.run(body)
    acc = np.zeros(3)
    for i in range(40):
        acc = (acc + i * 1 + 1.0) + (acc + 0 + 1.0)  # sub-rank 0 is parent rank 1
    assert_bits(results[0], acc, "rank 0")
    assert_bits(results[1], acc, "rank 1")
    expected = np.stack([np.full(3, -1.0), acc])  # sub-rank 0 is parent rank 3
    assert_bits(results[2], expected, "rank 2")
    assert_bits(results[3], expected, "rank 3")


def test_nested_split_gives_working_communicators_at_every_level(world):
    @on_rank
    def body(comm):
        n = comm.size
        half = comm.split(comm.rank * 2 // max(n, 2), key=-comm.rank)
        quarter = half.split(half.rank % 2, key=0)
        none = half.split(None if half.rank == 0 else 0)
        out = {
            "half": (half.rank, half.size, half.allgather(np.array(comm.rank)).tolist()),
            "quarter": (quarter.rank, quarter.size, quarter.allgather(np.array(comm.rank)).tolist()),
            "none": None if none is None else none.allgather(np.array(comm.rank)).tolist(),
        }
        # interleave levels: each fold is over its own members
        x = np.array([1.0, comm.rank])
        out["sums"] = [comm.allreduce(x), half.allreduce(x), quarter.allreduce(x), comm.allreduce(x)]
        if none is not None:
            none.free()
        quarter.free()
        half.free()
        out["after"] = float(comm.allreduce(np.array(1.0)))
        return out

    n = world.size
    colors = [r * 2 // max(n, 2) for r in range(n)]
    halves = split_groups(colors, [-r for r in range(n)])
    results = world.run(body)
    for rank, got in enumerate(results):
        half = halves[colors[rank]]
        assert got["half"] == (half.index(rank), len(half), half)
        h = half.index(rank)
        quarter = [p for i, p in enumerate(half) if i % 2 == h % 2]
        assert got["quarter"] == (quarter.index(rank), len(quarter), quarter)
        assert got["none"] == (None if h == 0 else half[1:])
        for got_sum, members in zip(got["sums"], [list(range(n)), half, quarter, list(range(n))]):
            assert_bits(got_sum, left_fold("sum", [np.array([1.0, p]) for p in members]), f"rank {rank}")
        assert got["after"] == n


def test_free_then_split_again_many_times_reuses_contexts(world):
    """Many splits, each freed so that the next reuses its context, while
    one long-lived sub-communicator stays in use."""
    rounds = 150

    @on_rank
    def body(comm):
        keep = comm.split(0, key=-comm.rank)
        out = []
        for i in range(rounds):
            sub = comm.split((comm.rank + i) % 2, key=(comm.rank * 7 + i) % 3)
            x = np.array([comm.rank, i], np.int64)
            out.append((sub.rank, sub.allgather(np.array(comm.rank)).tolist(), sub.allreduce(x).tolist()))
            if i % 10 == 0:
                out.append(keep.allgather(np.array(comm.rank)).tolist())
            sub.free()
        keep.free()
        return out

    n = world.size
    results = world.run(body)
    for rank in range(n):
        got = iter(results[rank])
        for i in range(rounds):
            colors = [(r + i) % 2 for r in range(n)]
            keys = [(r * 7 + i) % 3 for r in range(n)]
            members = split_groups(colors, keys)[colors[rank]]
            sub_rank, gathered, total = next(got)
            assert (sub_rank, gathered) == (members.index(rank), members), f"round {i}"
            assert total == [sum(members), i * len(members)]
            if i % 10 == 0:
                assert next(got) == list(reversed(range(n)))


def test_messages_on_a_subcommunicator_use_its_ranks_and_do_not_match_the_worlds(p2p_world):
    def body(comm):
        sub = comm.split(0, key=-comm.rank)  # sub-rank s is world rank size-1-s
        n = comm.size
        if comm.rank == n - 1:  # sub-rank 0
            comm.send(np.array([1]), 0, tag=0)  # world message to world rank 0
            sub.send(np.array([2]), n - 1, tag=0)  # sub message to sub-rank n-1 = world rank 0
            return None
        if comm.rank == 0:
            from_sub = sub.recv(0, tag=0)  # from sub-rank 0
            from_world = comm.recv(n - 1, tag=0)
            return from_sub.tolist(), from_world.tolist()

    assert p2p_world.run(body)[0] == ([2], [1])


# -- a random program ----------------------------------------------------------------

PROGRAM_KINDS = ("allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
                 "reduce_scatter", "alltoall", "barrier", "sendrecv", "split")


def program(seed: int, size: int, steps: int, big: int = 0) -> list[tuple]:
    """A random sequence of collectives; every call's arguments and data seed."""
    rng = np.random.default_rng(seed)
    kinds = [k for k in PROGRAM_KINDS if size > 1 or k != "sendrecv"]
    out = []
    for i in range(steps):
        kind = kinds[rng.integers(len(kinds))]
        dtype = DTYPES[rng.integers(len(DTYPES))].name
        shape = [(), (0,), (int(rng.integers(1, 40)),), (int(rng.integers(1, 6)), int(rng.integers(1, 6))),
                 (2, 0, 3), (big or 7,)][rng.integers(6)]
        ops = ops_for(dtype)
        op = ops[rng.integers(len(ops))]
        root = int(rng.integers(size))
        seed_i = 1000 * seed + i
        if kind in ("allreduce", "reduce", "reduce_scatter"):
            out.append((kind, dtype, shape, op, root, seed_i))
        elif kind in ("broadcast", "allgather", "gather", "scatter", "alltoall"):
            out.append((kind, dtype, shape, None, root, seed_i))
        elif kind == "barrier":
            out.append((kind,))
        elif kind == "sendrecv":
            src, dst = (int(r) for r in rng.choice(size, 2, replace=False))
            out.append((kind, dtype, shape, int(rng.integers(3)), (src, dst), seed_i))
        else:
            colors = [None if c == 2 else int(c) for c in rng.integers(0, 3, size)]
            keys = [int(k) for k in rng.integers(-1, 2, size)]
            out.append((kind, "float64", shape, "sum", (colors, keys), seed_i))
    return out


@on_rank
def _rank_program(comm, steps):
    me, n = comm.rank, comm.size
    out = []
    for step in steps:
        kind = step[0]
        if kind == "barrier":
            out.append(comm.barrier())
            continue
        _, dtype, shape, op, root, seed = step
        x = values(dtype, shape, seed, me)
        xb = values(dtype, (n, *shape), seed, me)
        if kind == "allreduce":
            out.append(checked(lambda a: comm.allreduce(a, op), x))
        elif kind == "reduce":
            out.append(checked(lambda a: comm.reduce(a, root, op), x))
        elif kind == "reduce_scatter":
            out.append(checked(lambda a: comm.reduce_scatter(a, op), xb))
        elif kind == "broadcast":
            out.append(checked(lambda a: comm.broadcast(a, root), x) if me == root else comm.broadcast(None, root))
        elif kind == "allgather":
            out.append(checked(comm.allgather, x))
        elif kind == "gather":
            out.append(checked(lambda a: comm.gather(a, root), x))
        elif kind == "scatter":
            out.append(checked(lambda a: comm.scatter(a, root), xb) if me == root else comm.scatter(None, root))
        elif kind == "alltoall":
            out.append(checked(comm.alltoall, xb))
        elif kind == "sendrecv":
            src, dst = root
            if me == src:
                comm.send(x, dst, tag=op)
            out.append(comm.recv(src, tag=op) if me == dst else None)
        elif kind == "split":
            colors, keys = root
            sub = comm.split(colors[me], keys[me])
            out.append(None if sub is None else (sub.rank, checked(lambda a: sub.allreduce(a, op), x)))
            if sub is not None:
                sub.free()
    return out


def expected_program(steps, size) -> list[list]:
    """The results of ``steps`` on each rank, computed with numpy."""
    per_rank = [[] for _ in range(size)]
    for step in steps:
        kind = step[0]
        if kind == "barrier":
            for r in range(size):
                per_rank[r].append(None)
            continue
        _, dtype, shape, op, root, seed = step
        xs = [values(dtype, shape, seed, j) for j in range(size)]
        xbs = [values(dtype, (size, *shape), seed, j) for j in range(size)]
        for r in range(size):
            if kind == "allreduce":
                e = left_fold(op, xs)
            elif kind == "reduce":
                e = left_fold(op, xs) if r == root else None
            elif kind == "reduce_scatter":
                e = left_fold(op, [x[r] for x in xbs])
            elif kind == "broadcast":
                e = xs[root]
            elif kind == "allgather":
                e = np.stack(xs)
            elif kind == "gather":
                e = np.stack(xs) if r == root else None
            elif kind == "scatter":
                e = xbs[root][r]
            elif kind == "alltoall":
                e = np.stack([x[r] for x in xbs])
            elif kind == "sendrecv":
                e = xs[root[0]] if r == root[1] else None
            else:
                colors, keys = root
                if colors[r] is None:
                    e = None
                else:
                    members = split_groups(colors, keys)[colors[r]]
                    e = (members.index(r), left_fold(op, [xs[p] for p in members]))
            per_rank[r].append(e)
    return per_rank


def _compare_program(steps, results, expected):
    for rank, (got, exp) in enumerate(zip(results, expected)):
        assert len(got) == len(exp) == len(steps)
        for i, (g, e) in enumerate(zip(got, exp)):
            what = f"rank {rank} step {i} {steps[i][:3]}"
            if e is None:
                assert g is None, what
            elif isinstance(e, tuple):
                assert g[0] == e[0], what
                assert_bits(g[1], e[1], what)
            else:
                assert_bits(g, np.asarray(e), what)


@pytest.mark.parametrize("seed", range(4))
def test_a_random_program_of_collectives_matches_numpy(world, seed):
    steps = program(seed, world.size, 60)
    _compare_program(steps, world.run(_rank_program, steps), expected_program(steps, world.size))


@pytest.mark.parametrize("seed", range(2))
def test_a_random_program_with_large_messages_matches_numpy_on_chunked_worlds(chunked_world, seed):
    steps = program(100 + seed, chunked_world.size, 40, big=30_011)
    results = chunked_world.run(_rank_program, steps)
    _compare_program(steps, results, expected_program(steps, chunked_world.size))
