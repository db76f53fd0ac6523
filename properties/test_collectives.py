"""Properties of each collective and of their relations, on the backend under test.

Properties that hold for several collectives or ops are parametrised by
them (``test_inputs_are_never_modified[allreduce-sum]``), so that each
gets its own examples (see ``properties._cases``).

Relations between collectives (reduce + broadcast == allreduce, ...) are
checked bit for bit on exact data, which every legal reduction order gives
the same bits for; single calls are judged on any data by
:func:`simdist.reference.check` (bit for bit where the contract pins the
bits, within the summation bound where it does not).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from simdist import reference
from simdist._communicator import BLOCKED
from simdist._reduction import divide_mean, ops_for

from . import strategies as s
from ._cases import by_op, cases, per_case


def call(comm, collective: str, x, op=None, root=0):
    """``collective`` on ``comm`` (non-roots pass None where the contract allows)."""
    if collective == "allreduce":
        return comm.allreduce(x, op)
    if collective == "reduce":
        return comm.reduce(x, root, op)
    if collective == "reduce_scatter":
        return comm.reduce_scatter(x, op)
    if collective == "broadcast":
        return comm.broadcast(x if comm.rank == root else None, root)
    if collective == "gather":
        return comm.gather(x, root)
    if collective == "scatter":
        return comm.scatter(x if comm.rank == root else None, root)
    if collective == "barrier":
        return comm.barrier()
    return getattr(comm, collective)(x)


def _one_call(comm, collective, data, op, root):
    x = data[comm.rank]
    before = x.tobytes()
    out = call(comm, collective, x, op, root)
    return out, x.tobytes() == before


def _inputs(collective, data, root):
    return [d if collective not in ("broadcast", "scatter") or r == root else None
            for r, d in enumerate(data)]


@st.composite
def calls(draw, size: int, collective: str, op: str | None, exact: bool | None = None):
    """Data and a root for one call of ``collective`` (with ``op``, a reduction)."""
    dtype = draw(s.dtypes(op=op))
    shape = draw(s.shapes())
    if collective in BLOCKED:
        shape = (size, *shape[:2])
    exact = draw(st.booleans()) if exact is None else exact
    data = draw(s.rank_arrays(size, dtype, shape, exact=exact, op=op))
    return draw(s.roots(size)), data


def _judge(world, collective, op, root, data):
    outs = world.run(_one_call, collective, data, op, root)
    verdict = reference.check(collective, _inputs(collective, data, root), [o for o, _ in outs],
                              op=op or "sum", root=root)
    note(f"verdict: {verdict}")
    return verdict, outs


@cases()
@per_case
@given(st.data())
def test_every_collective_gives_what_the_contract_allows(world, collective, op, data):
    root, arrays = data.draw(calls(world.size, collective, op))
    verdict, _ = _judge(world, collective, op, root, arrays)
    assert verdict.ok, verdict.reason


@cases()
@per_case
@given(st.data())
def test_inputs_are_never_modified(world, collective, op, data):
    root, arrays = data.draw(calls(world.size, collective, op))
    _, outs = _judge(world, collective, op, root, arrays)
    assert all(untouched for _, untouched in outs), \
        f"{collective} modified the input on ranks {[r for r, (_, ok) in enumerate(outs) if not ok]}"


@cases(("allreduce", "broadcast", "alltoall", "reduce_scatter"))
@per_case
@given(st.data())
def test_dtype_and_shape_are_preserved(world, collective, op, data):
    root, arrays = data.draw(calls(world.size, collective, op))
    outs = world.run(_one_call, collective, arrays, op, root)
    want = arrays[0].shape[1:] if collective == "reduce_scatter" else arrays[0].shape
    for rank, (out, _) in enumerate(outs):
        assert isinstance(out, np.ndarray), f"rank {rank}: {collective} returned {type(out).__name__}"
        assert (out.dtype, out.shape) == (arrays[0].dtype, want), \
            f"rank {rank}: {collective} gave {out.dtype}{out.shape}, expected {arrays[0].dtype}{want}"


@pytest.mark.simdist_collectives("allreduce")
@by_op(("sum", "prod", "mean"))
@per_case
@given(st.data())
def test_float_reductions_are_identical_on_every_rank_and_within_the_bound(world, op, data):
    dtype = data.draw(s.dtypes("fc", op))
    shape = data.draw(s.shapes(large=op != "prod"))     # a large product is judged element by element
    arrays = data.draw(s.rank_arrays(world.size, dtype, shape, op=op))
    verdict, outs = _judge(world, "allreduce", op, 0, arrays)
    assert verdict.ranks_identical, "allreduce gave different bits on different ranks"
    assert verdict.ok, verdict.reason


@pytest.mark.simdist_collectives("allreduce")
@by_op(ops_for(np.dtype("int64")))
@per_case
@given(st.data())
def test_min_max_and_integer_reductions_are_exact(world, op, data):
    dtype = data.draw(s.dtypes("biu", op))
    arrays = data.draw(s.rank_arrays(world.size, dtype, data.draw(s.shapes())))
    outs = world.run(_one_call, "allreduce", arrays, op, 0)
    want = reference.reduction(arrays, op)
    for rank, (out, _) in enumerate(outs):
        assert out.tobytes() == want.tobytes(), f"rank {rank}: allreduce({op}) on {dtype} is not exact"


def _relation(comm, kind, data, op, root):
    x = data[comm.rank]
    if kind == "reduce+broadcast":
        part = comm.reduce(x, root, op)
        return comm.broadcast(part, root), comm.allreduce(x, op)
    if kind == "reduce_scatter":
        return comm.reduce_scatter(x, op), comm.allreduce(x, op)[comm.rank]
    if kind == "gather+broadcast":
        return comm.broadcast(comm.gather(x, root), root), comm.allgather(x)
    if kind == "scatter+gather":
        return comm.gather(comm.scatter(x if comm.rank == root else None, root), root), \
            (x if comm.rank == root else None)
    if kind == "alltoall twice":
        return comm.alltoall(comm.alltoall(x)), x
    if kind == "mean":  # the contract's division (each component of a complex sum on its own)
        return comm.allreduce(x, "mean"), divide_mean(np.array(comm.allreduce(x, "sum")), comm.size)
    raise AssertionError(kind)


def _check_relation(world, kind, data, op=None, root=0):
    outs = world.run(_relation, kind, data, op, root)
    for rank, (got, want) in enumerate(outs):
        if want is None:
            assert got is None, f"rank {rank}: {kind}: expected None off the root, got {got!r}"
            continue
        assert got is not None and got.dtype == want.dtype and got.shape == want.shape, \
            f"rank {rank}: {kind}: {got!r} against {want!r}"
        if op == "prod" and got.dtype.kind == "c":
            # A complex product's zero components may carry either sign,
            # depending on the order (the textbook formula's a*d + b*c).
            same = np.array_equal(got, want, equal_nan=True)
        else:
            same = got.tobytes() == want.tobytes()
        assert same, f"rank {rank}: {kind}: the two sides differ:\n{got}\n{want}"


@pytest.mark.simdist_collectives("reduce", "broadcast", "allreduce")
@by_op()
@per_case
@given(st.data())
def test_reduce_then_broadcast_equals_allreduce(world, op, data):
    dtype = data.draw(s.dtypes(op=op))
    arrays = data.draw(s.exact_rank_arrays(world.size, dtype, data.draw(s.shapes()), op))
    _check_relation(world, "reduce+broadcast", arrays, op, data.draw(s.roots(world.size)))


@pytest.mark.simdist_collectives("reduce_scatter", "allreduce")
@by_op()
@per_case
@given(st.data())
def test_reduce_scatter_is_the_ranks_block_of_allreduce(world, op, data):
    dtype = data.draw(s.dtypes(op=op))
    shape = (world.size, *data.draw(s.shapes(max_dims=2)))
    _check_relation(world, "reduce_scatter", data.draw(s.exact_rank_arrays(world.size, dtype, shape, op)), op)


@pytest.mark.simdist_collectives("allgather", "gather", "broadcast")
@given(st.data())
def test_allgather_equals_gather_then_broadcast_in_rank_order(world, data):
    arrays = data.draw(s.rank_arrays(world.size, data.draw(s.dtypes()), data.draw(s.shapes())))
    _check_relation(world, "gather+broadcast", arrays, root=data.draw(s.roots(world.size)))
    outs = world.run(_one_call, "allgather", arrays, None, 0)
    for rank, (out, _) in enumerate(outs):
        for j in range(world.size):
            assert out[j].tobytes() == arrays[j].tobytes(), f"rank {rank}: allgather block {j} is not rank {j}'s"


@pytest.mark.simdist_collectives("scatter", "gather")
@given(st.data())
def test_scatter_then_gather_is_the_identity(world, data):
    shape = (world.size, *data.draw(s.shapes(max_dims=2)))
    arrays = data.draw(s.rank_arrays(world.size, data.draw(s.dtypes()), shape))
    _check_relation(world, "scatter+gather", arrays, root=data.draw(s.roots(world.size)))


@pytest.mark.simdist_collectives("alltoall")
@given(st.data())
def test_alltoall_twice_is_the_identity(world, data):
    shape = (world.size, *data.draw(s.shapes(max_dims=2)))
    _check_relation(world, "alltoall twice", data.draw(s.rank_arrays(world.size, data.draw(s.dtypes()), shape)))


@pytest.mark.simdist_collectives("allreduce")
@pytest.mark.simdist_ops("mean", "sum")
@given(st.data())
def test_mean_is_the_sum_divided_by_the_size(world, data):
    dtype = data.draw(s.dtypes("fc"))
    arrays = data.draw(s.exact_rank_arrays(world.size, dtype, data.draw(s.shapes()), "sum"))
    _check_relation(world, "mean", arrays)


def _program(comm, program):
    return [call(comm, step.collective, step.data[comm.rank], step.op, step.root) for step in program]


@given(st.data())
def test_a_program_of_collectives_gives_each_call_its_own_result(world, data):
    """Several calls in one run: no call returns an earlier call's result."""
    program = data.draw(s.programs(world.size, exact=False))
    outs = world.run(_program, program)
    for i, step in enumerate(program):
        if step.collective == "barrier":
            continue
        verdict = reference.check(step.collective, _inputs(step.collective, step.data, step.root),
                                  [o[i] for o in outs], op=step.op or "sum", root=step.root)
        assert verdict.ok, f"call {i} of the program: {verdict.reason}"
