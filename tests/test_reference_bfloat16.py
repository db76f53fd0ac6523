"""bfloat16 in the reference: judged as a float of 8 bits' precision,
bit for bit where every order is exact, within the bound elsewhere; a
sweep makes its rows only for a factory that says it carries it."""

from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import simdist  # noqa: E402
from simdist import reference  # noqa: E402
from simdist._orders import in_order  # noqa: E402
from simdist.reference import gamma, unit_roundoff  # noqa: E402
from simdist.reference._cases import plan  # noqa: E402
from simdist.reference._focus import select_dtypes  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)


def _parts(n: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(count) * np.exp2(rng.integers(-8, 9, count))).astype(BF16) for _ in range(n)]


def test_bfloat16_has_eight_bits_of_precision_in_the_bounds():
    assert unit_roundoff(BF16) == 2.0 ** -8
    assert gamma(2, BF16) == pytest.approx(2 * 2.0 ** -8 / (1 - 2 * 2.0 ** -8))


@pytest.mark.parametrize("order", ["fold", "ring", "recursive_doubling", "gloo_ring"])
def test_every_order_of_bfloat16_steps_is_within_the_bound_and_is_its_own_named_order(order):
    parts = _parts(4, 5000)
    got = in_order(order, "sum", parts)
    assert got.dtype == BF16
    verdict = reference.check("allreduce", parts, [got] * 4, op="sum")
    assert verdict.ok and not verdict.exact and 0 < verdict.ratio <= 1, verdict
    assert reference.check("allreduce", parts, [got] * 4, op="sum", order=order).ok


def test_a_bfloat16_sum_that_truncates_fails_the_bound_naming_the_element():
    parts = _parts(2, 5000, seed=1)
    exact = (parts[0].astype(np.float64) + parts[1].astype(np.float64)).astype(np.float32)
    truncated = (exact.view(np.int32) & np.int32(-65536)).view(np.float32).astype(BF16)  # toward zero
    verdict = reference.check("allreduce", parts, [truncated] * 2, op="sum")
    assert not verdict.ok and verdict.ratio > 1
    assert verdict.dtype == "bfloat16" and "worst element" in verdict.reason


def test_exact_bfloat16_sums_are_judged_bit_for_bit():
    parts = [np.array([1, -3, 16, 0.5], BF16) * (r + 1) for r in range(3)]
    right = in_order("fold", "sum", parts)
    assert reference.check("allreduce", parts, [right] * 3, op="sum").exact
    wrong = right.copy()
    wrong[2] = np.array(wrong[2].astype(np.float32) + 0.5, BF16)  # one unit in the last place
    verdict = reference.check("allreduce", parts, [wrong] * 3, op="sum")
    assert not verdict.ok and "bit for bit" in verdict.reason


def test_moved_bfloat16_is_judged_by_its_bits_nan_payloads_too():
    nan_payloads = np.array([0x7FC1, 0x7FC2, 0xFFC3, 0x0001], np.uint16).view(BF16)
    parts = [nan_payloads.copy() for _ in range(2)]
    assert reference.check("broadcast", parts, parts, root=0).ok
    other = np.array([0x7FC4, 0x7FC2, 0xFFC3, 0x0001], np.uint16).view(BF16)
    assert not reference.check("broadcast", parts, [other, parts[1]], root=0).ok


def test_a_sweep_has_bfloat16_rows_only_where_the_backend_carries_it():
    assert BF16 not in select_dtypes(None)
    assert select_dtypes(None, extra=("bfloat16",))[-1] == BF16
    assert select_dtypes(["bfloat16"], extra=("bfloat16",)) == (BF16,)
    with pytest.raises(simdist.InvalidArgument, match="bfloat16 only where a backend carries it"):
        select_dtypes(["bfloat16", "float32"])
    rows = plan(3, True, ("allreduce", "broadcast"), (BF16,))
    ops = ("sum", "prod", "min", "max", "mean")
    assert [(r.collective, r.op) for r in rows] == [*(("allreduce", op) for op in ops), ("broadcast", None)]
