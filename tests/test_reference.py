"""simdist.reference: verdicts on right and wrong results, the bounds, the
named orders, and (slow) Open MPI pinned to an algorithm, compared to the bit.

Correct outputs come from the plain numpy left fold of ``tests/reference.py``
(independent of ``simdist._reduction``); no processes except in the MPI test.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import left_fold, values
from simdist import InvalidType, InvalidValue
from simdist import _orders, _reduction
from simdist.reference import ORDERS, Verdict, check, gamma, reduction, unit_roundoff
from conftest import mpiexec_or_skip
from simdist.mpi._driver import flavor, launch_environment, session_tmpdir

FLOATS = ("float16", "float32", "float64", "complex64", "complex128")


def outputs_of(collective, inputs, op="sum", root=0):
    """What a correct backend returns on each rank, by the numpy fold."""
    n = len(inputs)
    if collective == "allreduce":
        return [left_fold(op, inputs) for _ in range(n)]
    if collective == "reduce":
        return [left_fold(op, inputs) if r == root else None for r in range(n)]
    if collective == "reduce_scatter":
        return [left_fold(op, [x[r] for x in inputs]) for r in range(n)]
    if collective == "broadcast":
        return [inputs[root].copy() for _ in range(n)]
    if collective == "allgather":
        return [np.stack(inputs) for _ in range(n)]
    if collective == "gather":
        return [np.stack(inputs) if r == root else None for r in range(n)]
    if collective == "scatter":
        return [inputs[root][r].copy() for r in range(n)]
    if collective == "alltoall":
        return [np.stack([x[r] for x in inputs]) for r in range(n)]
    raise AssertionError(collective)


def inputs_for(collective, dtype, n, shape=(5,), seed=0):
    blocked = collective in ("reduce_scatter", "scatter", "alltoall")
    return [values(dtype, (n, *shape) if blocked else shape, seed, r) for r in range(n)]


def ulps(x, k):
    """``x`` moved ``k`` ulps up, elementwise, in its own dtype."""
    x = np.array(x)
    for _ in range(k):
        x = np.nextafter(x, np.array(np.inf, x.dtype))
    return x


# -- right results pass ------------------------------------------------------


@pytest.mark.parametrize("collective", ["allreduce", "reduce", "reduce_scatter", "broadcast", "allgather",
                                        "gather", "scatter", "alltoall"])
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128", "bool"])
def test_correct_results_of_every_collective_pass(collective, dtype):
    n = 4
    inputs = inputs_for(collective, dtype, n)
    op = "max" if dtype == "bool" else "sum"
    verdict = check(collective, inputs, outputs_of(collective, inputs, op, root=2), op=op, root=2)
    assert verdict.ok, verdict.reason
    assert verdict.reason == ""
    assert verdict.exact == (dtype in ("int16", "bool") or collective not in ("allreduce", "reduce", "reduce_scatter"))
    assert verdict.ratio <= 1
    assert verdict.ranks_identical == (True if collective in ("allreduce", "broadcast", "allgather") else None)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint32", "bool"])
@pytest.mark.parametrize("op", _reduction.OPS)
def test_integer_and_bool_reductions_are_checked_bit_for_bit(dtype, op):
    if not _reduction.accepts(op, np.dtype(dtype)):
        return
    inputs = [values(dtype, (7,), 3, r) for r in range(5)]
    outputs = outputs_of("allreduce", inputs, op)
    verdict = check("allreduce", inputs, outputs, op=op)
    assert verdict.ok and verdict.exact and verdict.bound == 0, verdict
    if dtype != "bool":
        wrong = outputs[1].copy()
        wrong[3] ^= 1
        bad = check("allreduce", inputs, [outputs[0], wrong, *outputs[2:]], op=op)
        assert not bad.ok and bad.ratio == math.inf and "rank 1" in bad.reason and "element 3" in bad.reason


def test_logical_ops_on_integers_must_give_zero_or_one():
    inputs = [np.array([0, 5, -3], np.int32), np.array([7, 0, 2], np.int32)]
    assert check("allreduce", inputs, [np.array([0, 0, 1], np.int32)] * 2, op="land").ok
    verdict = check("allreduce", inputs, [np.array([0, 0, 2], np.int32)] * 2, op="land")
    assert not verdict.ok and "expected 1" in verdict.reason


# -- wrong results fail, with the reason -------------------------------------


def test_sum_missing_one_rank_fails():
    inputs = [values("float32", (9,), 1, r) for r in range(4)]
    partial = left_fold("sum", inputs[:3])
    verdict = check("allreduce", inputs, [partial] * 4)
    assert not verdict.ok and verdict.ratio > 1e3
    assert verdict.ranks_identical
    assert "element(s) wrong" in verdict.reason and "> bound" in verdict.reason


def test_one_ulp_on_one_rank_makes_ranks_differ():
    inputs = [values("float64", (6,), 2, r) for r in range(4)]
    outputs = outputs_of("allreduce", inputs)
    outputs[2] = outputs[2].copy()
    outputs[2][4] = ulps(outputs[2][4], 1)
    verdict = check("allreduce", inputs, outputs)
    assert not verdict.ok
    assert verdict.ranks_identical is False
    assert "ranks disagree: rank(s) [2]" in verdict.reason
    assert verdict.ratio <= 1  # within the bound, but MPI demands the same bits everywhere


def test_wrong_block_in_reduce_scatter_fails():
    inputs = inputs_for("reduce_scatter", "float32", 4, seed=4)
    outputs = outputs_of("reduce_scatter", inputs)
    outputs[1], outputs[2] = outputs[2], outputs[1]
    verdict = check("reduce_scatter", inputs, outputs)
    assert not verdict.ok and "rank 1" in verdict.reason and "rank 2" in verdict.reason


def test_narrowed_float64_fails():
    inputs = [values("float64", (8,), 5, r) for r in range(4)]
    narrowed = left_fold("sum", [x.astype(np.float32) for x in inputs]).astype(np.float64)
    verdict = check("allreduce", inputs, [narrowed] * 4)
    assert not verdict.ok and verdict.ratio > 1e6
    in_float32 = check("allreduce", inputs, [narrowed.astype(np.float32)] * 4)
    assert not in_float32.ok and "dtype float32; the contract says float64" in in_float32.reason


def test_allgather_in_the_wrong_order_fails():
    inputs = [values("int32", (3,), 6, r) for r in range(3)]
    swapped = np.stack([inputs[1], inputs[0], inputs[2]])
    verdict = check("allgather", inputs, [swapped] * 3)
    assert not verdict.ok and verdict.exact and verdict.ranks_identical and verdict.ratio == math.inf


@pytest.mark.parametrize(
    "collective, mangle, message",
    [
        ("allreduce", lambda out: out.astype(np.float64), "dtype float64; the contract says float32"),
        ("allreduce", lambda out: out.reshape(1, -1), "shape (1, 5); the contract says (5,)"),
        ("allreduce", lambda out: out.tolist(), "returned list, not a numpy array"),
        ("allreduce", lambda out: None, "returned NoneType, not a numpy array"),
        ("allgather", lambda out: np.concatenate(list(out)), "shape (15,); the contract says (3, 5)"),
        ("scatter", lambda out: out[None], "shape (1, 5); the contract says (5,)"),
    ],
)
def test_wrong_type_dtype_or_shape_fails(collective, mangle, message):
    inputs = inputs_for(collective, "float32", 3)
    outputs = outputs_of(collective, inputs)
    outputs[1] = mangle(outputs[1])
    verdict = check(collective, inputs, outputs)
    assert not verdict.ok and f"rank 1: {collective} returned" in verdict.reason and message in verdict.reason


@pytest.mark.parametrize("collective", ["reduce", "gather"])
def test_an_array_off_root_fails(collective):
    inputs = inputs_for(collective, "float32", 3)
    outputs = outputs_of(collective, inputs, root=1)
    outputs[0] = np.zeros(1, np.float32)
    verdict = check(collective, inputs, outputs, root=1)
    assert not verdict.ok and f"rank 0: {collective} returned ndarray where the contract says None" in verdict.reason


def test_a_malformed_result_is_infinitely_wrong():
    inputs = [values("float64", (4,), 14, r) for r in range(3)]
    verdict = check("reduce", inputs, [np.zeros(4, np.float32), None, None])
    assert not verdict.ok and verdict.ratio == math.inf and not verdict.exact


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1,)])
@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather", "alltoall"])
def test_zero_d_and_empty_arrays(collective, shape):
    n = 3
    inputs = inputs_for(collective, "float32", n, shape=shape, seed=15)
    outputs = outputs_of(collective, inputs)
    verdict = check(collective, inputs, outputs)
    assert verdict.ok, verdict
    if outputs[0].size:
        outputs[0] = outputs[0] + np.float32(1)
        assert not check(collective, inputs, outputs).ok


def test_data_movement_compares_nan_payloads():
    x = np.array([np.nan, 1.0])
    other_nan = x.copy()
    other_nan.view(np.uint64)[0] ^= 1
    verdict = check("broadcast", [x, None], [x.copy(), other_nan])
    assert not verdict.ok and verdict.ranks_identical is False


# -- exact inputs and the bound ----------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_exactly_summable_inputs_are_checked_bit_for_bit(dtype, op):
    inputs = [np.arange(-4, 6).astype(dtype) * (r + 1) for r in range(6)]
    for order in ORDERS[:3]:  # every order gives the same bits
        verdict = check("allreduce", inputs, [reduction(inputs, op, order)] * 6, op=op)
        assert verdict.ok and verdict.exact and verdict.bound == 0 and verdict.ratio == 0, verdict
    off = left_fold(op, inputs).copy()
    off[7] = ulps(off[7], 1) if dtype.startswith("f") else off[7] + np.finfo(dtype).eps * abs(off[7])
    verdict = check("allreduce", inputs, [off] * 6, op=op)
    assert not verdict.ok and verdict.exact and verdict.ratio == math.inf and "(bit for bit)" in verdict.reason


def test_negative_zero_sum_is_exact():
    minus = np.array([-0.0], np.float32)
    assert check("allreduce", [minus, minus], [minus, minus]).ok
    assert not check("allreduce", [minus, minus], [-minus, -minus]).ok  # all -0 sum to -0
    assert check("allreduce", [minus, -minus], [-minus, -minus]).ok  # -0 + +0 = +0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bound_catches_a_few_ulps_times_n_on_benign_data(dtype):
    n = 8
    rng = np.random.default_rng(7)
    inputs = [rng.uniform(1, 2, 64).astype(dtype) for _ in range(n)]
    right = left_fold("sum", inputs)
    assert check("allreduce", inputs, [right] * n).ok
    assert check("allreduce", inputs, [ulps(right, 1)] * n).ok  # one ulp is within gamma(N-1) * sum|x|
    verdict = check("allreduce", inputs, [ulps(right, 3 * n)] * n)
    assert not verdict.ok and 1 < verdict.ratio < 10, verdict


def test_tree_order_has_the_tighter_bound():
    n = 8
    rng = np.random.default_rng(8)
    inputs = [rng.uniform(1, 2, 64).astype(np.float32) for _ in range(n)]
    s = np.array([math.fsum(c) for c in np.stack(inputs).astype(np.float64).T])
    total = np.stack(inputs).astype(np.float64).sum(0)
    # an error between gamma(3) and gamma(7) times sum|x|, rounded into float32
    shifted = (s + 5 * unit_roundoff(np.float32) * total).astype(np.float32)
    assert check("allreduce", inputs, [shifted] * n).ok
    verdict = check("allreduce", inputs, [shifted] * n, order="tree")
    assert not verdict.ok and verdict.ratio > 1
    assert check("allreduce", inputs, [reduction(inputs, "sum", "recursive_doubling")] * n, order="tree").ok


def test_gamma_and_unit_roundoff():
    assert unit_roundoff(np.float16) == 2.0**-11
    assert unit_roundoff("complex64") == 2.0**-24
    assert gamma(3, np.float64) == 3 * 2.0**-53 / (1 - 3 * 2.0**-53)
    with pytest.raises(InvalidValue, match="k=4096 is too large"):
        gamma(4096, np.float16)


def test_mean_error_is_judged_against_the_exact_mean():
    n = 3
    inputs = [np.array([0.1, 1e8, -1e8], np.float64)[[r, (r + 1) % 3, (r + 2) % 3]] for r in range(n)]
    verdict = check("allreduce", inputs, [left_fold("mean", inputs)] * n, op="mean")
    assert verdict.ok and not verdict.exact
    wrong = check("allreduce", inputs, [left_fold("sum", inputs)] * n, op="mean")  # forgot to divide
    assert not wrong.ok


# -- products ----------------------------------------------------------------


def test_real_product_bound_and_sign():
    rng = np.random.default_rng(9)
    inputs = [rng.uniform(0.5, 2, 16).astype(np.float32) * rng.choice([-1, 1], 16).astype(np.float32)
              for _ in range(6)]
    right = left_fold("prod", inputs)
    assert check("allreduce", inputs, [right] * 6, op="prod").ok
    assert not check("allreduce", inputs, [ulps(np.abs(right), 40) * np.sign(right)] * 6, op="prod").ok
    assert not check("allreduce", inputs, [-right] * 6, op="prod").ok


def test_real_product_that_underflows_in_some_order():
    inputs = [np.array([v], np.float32) for v in (1e-30, 1e-30, 1e30, 1e30)]
    folded = left_fold("prod", inputs)  # 1e-60 underflows to 0 first
    assert folded[0] == 0
    assert check("allreduce", inputs, [folded] * 4, op="prod").ok
    exact = np.array([1.0], np.float32)  # the order (x0 * x2) * (x1 * x3) gets it right
    assert check("allreduce", inputs, [exact] * 4, op="prod").ok


def test_complex_product_bound():
    rng = np.random.default_rng(10)
    inputs = [(rng.uniform(-2, 2, 12) + 1j * rng.uniform(-2, 2, 12)).astype(np.complex64) for _ in range(5)]
    right = left_fold("prod", inputs)
    assert check("allreduce", inputs, [right] * 5, op="prod").ok
    assert check("allreduce", inputs, [reduction(inputs, "prod", "recursive_doubling")] * 5, op="prod").ok
    off = right * np.complex64(1 + 1e-4)
    verdict = check("allreduce", inputs, [off] * 5, op="prod")
    assert not verdict.ok and verdict.ratio > 1


# -- NaN and Inf -------------------------------------------------------------


@pytest.mark.parametrize(
    "column, good, bad",
    [
        ([1.0, np.nan, 2.0], np.nan, 3.0),
        ([np.inf, -np.inf, 1.0], np.nan, np.inf),
        ([np.inf, 1.0, 2.0], np.inf, np.nan),
        ([-np.inf, 1.0, np.inf - np.inf], np.nan, -np.inf),
        ([-np.inf, 1.0, 2.0], -np.inf, np.inf),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_nonfinite_sums_must_have_the_ieee_class(column, good, bad, dtype):
    inputs = [np.array([v, 1.0], dtype) for v in column]
    for result, ok in ((good, True), (bad, False)):
        out = np.array([result, 3.0], dtype)
        verdict = check("allreduce", inputs, [out] * 3)
        assert verdict.ok is ok, (result, verdict)


@pytest.mark.parametrize("column, good, bad", [([np.inf, 0.0, 2.0], np.nan, np.inf),
                                               ([np.inf, -1.0, 2.0], -np.inf, np.inf),
                                               ([np.nan, 0.0, 2.0], np.nan, 0.0)])
def test_nonfinite_products_must_have_the_ieee_class(column, good, bad):
    inputs = [np.array([v]) for v in column]
    assert check("allreduce", inputs, [np.array([good])] * 3, op="prod").ok
    assert not check("allreduce", inputs, [np.array([bad])] * 3, op="prod").ok


def test_overflow_in_some_order_allows_inf():
    inputs = [np.array([v], np.float16) for v in (60000, 60000, -60000)]
    folded = left_fold("sum", inputs)
    assert folded[0] == np.inf
    assert check("allreduce", inputs, [folded] * 3).ok
    assert check("allreduce", inputs, [np.array([60000], np.float16)] * 3).ok
    small = [np.array([v], np.float16) for v in (1, 2, 3)]  # no order overflows: inf is wrong
    assert not check("allreduce", small, [np.array([np.inf], np.float16)] * 3).ok


def test_float_min_max_compare_by_value_but_propagate_nan():
    zeros = [np.array([0.0]), np.array([-0.0])]
    assert check("allreduce", zeros, [np.array([-0.0])] * 2, op="max").ok
    assert check("allreduce", zeros, [np.array([0.0])] * 2, op="max").ok
    with_nan = [np.array([1.0]), np.array([np.nan])]
    assert check("allreduce", with_nan, [np.array([np.nan])] * 2, op="max").ok
    assert not check("allreduce", with_nan, [np.array([1.0])] * 2, op="max").ok


# -- the named orders ----------------------------------------------------------


def adversarial(dtype, n, count, seed=0):
    """Mixed signs and magnitudes: the association shows in the bits."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(1, 2, count) * rng.choice([-1, 1], count) * 2.0 ** rng.integers(-20, 21, count))
            .astype(dtype) for _ in range(n)]


def test_ring_blocks_follow_open_mpi_split():
    assert _orders.ring_blocks(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert _orders.ring_blocks(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [b - a for a, b in _orders.ring_blocks(37, 5)] == [8, 8, 7, 7, 7]


def test_ring_block_b_is_the_fold_starting_at_rank_b():
    parts = adversarial(np.float32, 5, 10)
    out = reduction(parts, "sum", "ring")
    for b, (start, stop) in enumerate(_orders.ring_blocks(10, 5)):
        rotated = [parts[(b + j) % 5][start:stop] for j in range(5)]
        np.testing.assert_array_equal(out[start:stop], left_fold("sum", rotated))


def test_recursive_doubling_association():
    a, b, c, d, e = (np.array([v], np.float64) for v in (1.0, 2.0**53, -(2.0**53), 1.0, 3.0))
    # N = 5: P = 4, ranks 0 and 1 pair first; then ((v0 + v1) + (v2 + v3)) with v = [a+b, c, d, e]
    expect = ((a + b) + c) + (d + e)
    assert reduction([a, b, c, d, e], "sum", "recursive_doubling").tobytes() == expect.tobytes()
    assert _orders.depth("recursive_doubling", 5) == 3 and _orders.depth(None, 5) == 4


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8])
def test_ring_with_fewer_elements_than_ranks_is_recursive_doubling(n):
    parts = adversarial(np.float32, n, max(n - 1, 1), seed=n)
    assert reduction(parts, "sum", "ring").tobytes() == reduction(parts, "sum", "recursive_doubling").tobytes()


@pytest.mark.parametrize("order", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_orders_differ_from_the_fold_yet_satisfy_the_bound(order, dtype):
    n, count = 7, 200
    parts = adversarial(dtype, n, count)
    out = reduction(parts, "sum", order)
    fold = _reduction.fold("sum", parts, np.empty_like(parts[0]))
    assert out.tobytes() != fold.tobytes()
    assert check("allreduce", parts, [out] * n).ok
    pinned = check("allreduce", parts, [out] * n, order=order)
    assert pinned.ok and pinned.exact
    wrong = check("allreduce", parts, [fold] * n, order=order)
    assert not wrong.ok and wrong.exact and "(bit for bit)" in wrong.reason


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "max", "bxor"])
def test_fold_order_is_the_simulators_fold(op):
    dtype = "int32" if op == "bxor" else "complex64" if op == "prod" else "float16"
    parts = [values(dtype, (3, 4), 11, r) for r in range(6)]
    expect = _reduction.fold(op, [p.copy() for p in parts], np.empty_like(parts[0]))
    assert reduction(parts, op, "fold").tobytes() == expect.tobytes()
    assert check("allreduce", parts, [expect] * 6, op=op, order="fold").ok


def test_reduce_scatter_with_an_order_is_that_block_of_the_allreduce():
    n = 4
    inputs = [values("float32", (n, 9), 12, r) for r in range(n)]
    full = reduction(inputs, "sum", "ring")
    assert check("reduce_scatter", inputs, [full[r] for r in range(n)], order="ring").ok
    blockwise = [reduction([x[r] for x in inputs], "sum", "ring") for r in range(n)]
    assert not check("reduce_scatter", inputs, blockwise, order="ring").ok  # segments differ


# -- the simulator's own results never fail ------------------------------------


@st.composite
def reductions(draw):
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    op = draw(st.sampled_from(["sum", "mean", "prod"]))
    n = draw(st.integers(1, 8))
    shape = draw(st.sampled_from([(), (0,), (1,), (7,), (3, 4), (33,)]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    real = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else dtype
    emax = {2: 15, 4: 127, 8: 1023}[real.itemsize]
    span = draw(st.sampled_from([2, 10, emax // 4, emax]))  # benign to every magnitude

    def part():
        x = rng.uniform(1, 2, shape) * rng.choice([-1.0, 1.0], shape) * np.exp2(rng.integers(-span, span, shape))
        x = np.where(rng.random(shape) < 0.1, 0.0, x)
        x = np.where(rng.random(shape) < 0.05, -0.0, x)
        with np.errstate(all="ignore"):
            return np.asarray(x).astype(real)

    parts = []
    for _ in range(n):
        x = np.empty(shape, dtype)
        if dtype.kind == "c":
            x.real, x.imag = part(), part()
        else:
            x[...] = part()
        parts.append(x)
    return op, parts


@settings(deadline=None)
@given(reductions())
def test_the_simulators_results_never_fail(case):
    op, parts = case
    n = len(parts)
    outputs = [_reduction.fold(op, [p.copy() for p in parts], np.empty_like(parts[0]))] * n
    verdict = check("allreduce", parts, outputs, op=op)
    assert verdict.ok, verdict
    assert verdict.ratio <= 1
    plain = check("allreduce", parts, [left_fold(op, parts)] * n, op=op)  # the independent numpy fold
    assert plain.ok, plain


@settings(deadline=None)
@given(reductions(), st.sampled_from(["ring", "recursive_doubling"]))
def test_named_orders_never_fail_the_bound(case, order):
    op, parts = case
    n = len(parts)
    out = reduction(parts, op, order)
    assert check("allreduce", parts, [out] * n, op=op).ok
    assert check("allreduce", parts, [out] * n, op=op, order=order).ok
    if order == "recursive_doubling" and op != "prod":
        assert check("allreduce", parts, [out] * n, op=op, order="tree").ok


# -- the verdict as data, and calls that cannot be judged ----------------------


def test_verdict_is_frozen_data_with_json():
    inputs = [values("float32", (4,), 13, r) for r in range(3)]
    verdict = check("allreduce", inputs, [left_fold("sum", inputs)] * 2 + [np.zeros(4, np.float32)])
    assert isinstance(verdict, Verdict)
    with pytest.raises(Exception):
        verdict.ok = True
    data = json.loads(verdict.to_json())
    assert data["collective"] == "allreduce" and data["dtype"] == "float32" and data["op"] == "sum"
    assert data["ok"] is False and data["ranks_identical"] is False and data["size"] == 3
    bad = check("allgather", inputs, [np.zeros((3, 4), np.float32)] * 3)
    assert json.loads(bad.to_json())["ratio"] == "inf"


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(collective="allsum"), InvalidValue, "collective='allsum' is not a collective"),
        (dict(outputs=[None]), InvalidValue, "len(inputs)=2 and len(outputs)=1"),
        (dict(op="avg"), InvalidValue, "op='avg' is not a reduction op"),
        (dict(op="band"), InvalidType, "op='band' is not defined on dtype float32"),
        (dict(order="spiral"), InvalidValue, "order='spiral' is not a known order"),
        (dict(collective="broadcast", order="ring"), InvalidValue, "only applies to reductions"),
        (dict(root=2), InvalidValue, "root=2 must be an int rank in 0..1"),
        (dict(inputs=[np.zeros(2, np.float32), np.zeros(3, np.float32)]), InvalidValue, "same dtype and shape"),
        (dict(inputs=[np.zeros(2, np.float32), None]), InvalidType, "inputs[1]=None"),
        (dict(collective="scatter", inputs=[np.zeros(3, np.float32), None]), InvalidValue, "must have shape (2, ...)"),
    ],
)
def test_calls_that_cannot_be_judged_raise(kwargs, error, message):
    call = dict(collective="allreduce", inputs=[np.zeros(2, np.float32)] * 2, outputs=[np.zeros(2, np.float32)] * 2)
    call.update(kwargs)
    with pytest.raises(error) as info:
        check(call.pop("collective"), call.pop("inputs"), call.pop("outputs"), **call)
    assert message in str(info.value)


# -- real Open MPI pinned to an algorithm ------------------------------------------

MPI_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dtype, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng([seed, comm.rank])
    x = (rng.uniform(1, 2, count) * rng.choice([-1, 1], count) * 2.0 ** rng.integers(-20, 21, count)).astype(dtype)
    r = np.empty_like(x)
    comm.Allreduce(x, r, op=MPI.SUM)
    got = comm.gather((x, r), root=0)
    if comm.rank == 0:
        np.savez(sys.argv[4], inputs=np.stack([g[0] for g in got]), outputs=np.stack([g[1] for g in got]))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, order", [(4, "ring"), (3, "recursive_doubling")])
@pytest.mark.parametrize("n, count", [(4, 37), (5, 37), (3, 2), (6, 100)])
def test_open_mpi_pinned_to_an_algorithm_matches_the_named_order(tmp_path, algorithm, order, n, count):
    mpiexec = mpiexec_or_skip()
    if flavor(mpiexec) != "openmpi":
        pytest.skip("the algorithm numbers and MCA settings are Open MPI's")
    script, out = tmp_path / "allreduce.py", tmp_path / "result.npz"
    script.write_text(MPI_SCRIPT)
    tmpdir = session_tmpdir()  # no stale session files of a killed job in the way
    env = dict(launch_environment(mpiexec, tmpdir), OMPI_MCA_coll_tuned_use_dynamic_rules="1",
               OMPI_MCA_coll_tuned_allreduce_algorithm=str(algorithm))
    cmd = [mpiexec, "-n", str(n), "--oversubscribe", sys.executable, str(script), "float32", str(count), "17", str(out)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    data = np.load(out)
    inputs, outputs = list(data["inputs"]), list(data["outputs"])
    verdict = check("allreduce", inputs, outputs, order=order)
    assert verdict.ok and verdict.exact and verdict.ranks_identical, verdict
    assert check("allreduce", inputs, outputs).ok  # and within the bound, of course
    other = "ring" if order == "recursive_doubling" else "recursive_doubling"
    if count >= n and n > 2:  # the data are adversarial: another association shows in the bits
        assert not check("allreduce", inputs, outputs, order=other).ok


def test_public_names_of_the_module():
    import simdist.reference as module

    assert sorted(module.__all__) == sorted(
        ["Verdict", "check", "reduction", "gamma", "unit_roundoff", "COLLECTIVES", "ORDERS",
         "sweep", "load_factory", "SWEEP_COLLECTIVES"]
    )
    assert all(hasattr(module, name) for name in module.__all__)
    assert module.ORDERS == ("fold", "ring", "recursive_doubling", "gloo_ring", "tree")
