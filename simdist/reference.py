"""Reference checking: is what a backend computed what the contract allows?

:func:`check` takes, for one collective call, every rank's input and every
rank's output, and returns a :class:`Verdict` (data; printing is the caller's).
It needs no processes: feed it what a backend returned, e.g. from a
``World(backend=...)`` run. :func:`reduction` gives the bits of a named
reduction order (see :mod:`simdist._orders`).

What a backend is held to (DESIGN.md, "Reference checking"):

* **Data movement** (broadcast, allgather, gather, scatter, alltoall): the
  contract's bytes, dtype and shape, and ``None`` exactly where it says so.
* **Exact reductions**: integers and bool with every op (integer sum and prod
  wrap around, which is order-independent), min/max, bitwise and logical ops:
  the bits of the simulator's fold. Float min/max are compared by value, NaN
  with NaN: the sign of a zero min/max is not pinned (in numpy and in Open
  MPI's ``out > in ? out : in`` it depends on the order), but a NaN input must
  give NaN, as the contract says (Open MPI's MPI_MAX drops a NaN that is
  ``out``, so its NaN results depend on the order; such data fail here).
* **Floating-point reductions** (sum, mean, prod on float and complex): every
  rank's result identical to the bit (allreduce), and every element within a
  rigorous error bound of the exact result -- or the bits of a named order when
  ``order`` names one. The bounds follow.

Floating-point bounds
---------------------
``u`` is the unit roundoff (2**-11 float16, 2**-24 float32, 2**-53 float64;
complex: that of its components), ``eta`` the smallest subnormal,
``gamma(k) = k*u / (1 - k*u)``, ``N`` the number of ranks and ``k`` the
depth: the most operations one input can go through, ``N - 1`` for any order
(a fold, a ring, any tree), ``ceil(log2 N)`` for ``order="tree"`` or
``"recursive_doubling"``. All in exact arithmetic; see "How it is computed".

``sum`` (per component for complex). Any order of pairwise additions gives
``r = sum_i x_i (1 + d_i)`` with ``|d_i| <= gamma(k)`` (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., section 4.2 and Lemma 3.1), since
IEEE addition rounds with relative error ``<= u`` and is exact when the sum is
subnormal. So ``|r - S| <= gamma(k) * sum_i |x_i|`` where ``S`` is the exact
sum. This is measured against the exact ``S``, not its rounding: with a
rounded centre a further ``u*|S|`` would be needed.

``mean``: ``r = fl(t / N)`` with ``t`` the computed sum, so
``|r - S/N| <= (gamma(k) + u * (1 + gamma(k))) * sum_i |x_i| / N``.

``prod`` (real): any order gives ``r = p * prod(1 + d_j)`` over ``N - 1``
multiplications, so ``|r - p| <= gamma(N - 1) * |p|`` (Higham Lemma 3.1),
with ``p`` the exact product. If some order may underflow (the product of the
factors below 1 in magnitude, over ``1 + gamma(N-1)``, is below the smallest
normal), each rounding
into the subnormal range adds an absolute error ``<= eta / 2``, which the
later factors can magnify by at most ``Pbig = prod_i max(1, |x_i|)``; so the
slack becomes ``(N - 1) * eta * Pbig``. The sign of a product is exact in
IEEE arithmetic and is checked exactly.

``prod`` (complex): one multiplication by the textbook formula has normwise
relative error ``<= sqrt(2) * gamma(2)`` (Higham Lemma 3.5; it also covers
the fused multiply-add variant, whose sharp bound is ``2u``, and the sharp
``sqrt(5) u`` without FMA). Compounded over ``N - 1`` multiplications:
``|r - p| <= ((1 + mu)**(N-1) - 1) * |p|`` with ``mu = sqrt(2) * gamma(2)``,
plus ``2 * (N - 1) * eta * Pbig * (1 + mu)**(N-1)`` for underflow in the real
products (always included: a component can be tiny even when ``|z|`` is not).

Every bound gets a slack of ``N * eta`` (a few subnormals; flush-to-zero
hardware is not IEEE and may fail on subnormal data) and a relative margin of
``2**-40`` for the roundings in computing the bound and the error themselves;
both only make the check more lenient, by amounts far below one ulp of the
bound.

Exact in every order. When all partial sums of an element are representable
in every order -- all ``x_i`` are multiples of ``2**e`` (``e`` the lowest set
bit among them) and ``sum_i |x_i| < 2**(p + e)`` with ``p`` the precision, and
no overflow -- every order gives the exact sum, the sign of a zero result
included (``-0`` only when all inputs are ``-0``). Such elements (small
integers in float dtypes, N = 1, all zeros) are checked bit for bit against
the fold; likewise real products whose odd significands multiply to less than
``2**p`` with no possible under- or overflow. A result whose elements are all
of this kind gets ``exact=True``, ``bound=0``.

Not finite. NaN and Inf inputs: the result must be of the IEEE class the exact
operation gives -- NaN where any input is NaN or ``+inf`` meets ``-inf`` (sum)
or ``inf`` meets ``0`` (prod), else ``+-inf`` of the right sign. A complex
product with a non-finite input only needs a non-finite component (C's complex
Inf rules are not the textbook formula's), and a NaN is also accepted where
the finite terms may overflow to the opposite infinity, or the finite factors
underflow to zero, in some order. Finite inputs whose partial results may
overflow in some order (``(1 + gamma(k)) * sum |x_i|``, or the product of the
factors above 1 in magnitude times ``(1 + gamma(N-1))``, at or beyond the
largest finite value) may give a non-finite result; a finite result is still
held to the bound, which holds for every order that did not overflow.

How it is computed. Every float16/32/64 value is a double; ``S`` and
``sum |x_i|`` are computed in double, which is exact when the element's terms
span fewer than 53 bits (checked as above with ``p = 53``; always for
float16), else with ``math.fsum``, which returns the correctly rounded exact
sum, as ``fsum([r, -x_0, ..., -x_{N-1}])`` so that the error ``r - S`` is
itself correctly rounded. Products are exact with Python integers.

Named orders. ``order="fold"``, ``"ring"`` or ``"recursive_doubling"``
demands the bits of that order (:mod:`simdist._orders`); NaN payloads are not
compared. For Open MPI pin the algorithm with ``--mca
coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 3``
(recursive doubling) or ``4`` (ring). ``order="tree"`` asks only for the
tighter bound ``gamma(ceil(log2 N))``. For ``reduce_scatter`` the order is
that of the allreduce of the whole ``(N, ...)`` arrays, of which rank ``r``
gets block ``r``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from ._arguments import DTYPES
from ._errors import InvalidType, InvalidValue
from ._orders import ORDERS as _ORDER_FNS
from ._orders import depth as _depth
from ._orders import in_order as _in_order
from ._reduction import OPS, accepts, fold as _fold, quiet_fp

__all__ = ["Verdict", "check", "reduction", "gamma", "unit_roundoff", "COLLECTIVES", "ORDERS"]

#: The collectives :func:`check` knows, reductions first.
COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "broadcast", "allgather", "gather", "scatter", "alltoall")
_REDUCTIONS = frozenset(COLLECTIVES[:3])
#: Names ``order`` may take: the named orders (checked bit for bit) and "tree".
ORDERS = (*_ORDER_FNS, "tree")
_EXACT_OPS = frozenset(("min", "max", "band", "bor", "bxor", "land", "lor", "lxor"))
_MARGIN = 1.0 + 2.0**-40


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The verdict on one collective call.

    ``ok`` is the verdict. ``exact`` says the results were checked bit for bit
    (integers, exact ops, data movement, a named order, exactly summable
    inputs); then ``bound`` is 0 and ``ratio`` is 0 if they match, ``inf`` if
    not. Otherwise ``max_error / bound = ratio`` for the element with the
    largest ratio of error to its own bound (``ratio <= 1`` passes).
    ``ranks_identical`` is whether every rank got the same bytes, for the
    collectives that give every rank the same result (allreduce, broadcast,
    allgather), else None. ``reason`` is empty when ``ok``.
    """

    collective: str
    dtype: str
    op: str | None
    size: int
    order: str | None
    ok: bool
    exact: bool
    max_error: float
    bound: float
    ratio: float
    ranks_identical: bool | None
    reason: str = ""

    def to_dict(self) -> dict:
        """The fields as a dict of JSON types (``inf``/``nan`` as strings)."""
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = str(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def unit_roundoff(dtype) -> float:
    """``u = 2**-p`` of a float or complex dtype (p = 11, 24, 53)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def gamma(k: int, dtype) -> float:
    """``gamma(k) = k*u / (1 - k*u)`` (Higham's notation); requires ``k*u < 1``."""
    ku = k * unit_roundoff(dtype)
    if ku >= 1:
        raise InvalidValue(f"gamma: k={k} is too large for dtype {np.dtype(dtype)} (k*u >= 1)")
    return ku / (1 - ku)


def reduction(parts: Sequence[np.ndarray], op: str = "sum", order: str = "fold") -> np.ndarray:
    """``parts`` (one array per rank) reduced with ``op`` in a named ``order``
    (``"fold"``, ``"ring"``, ``"recursive_doubling"``), in the input dtype."""
    if order not in _ORDER_FNS:
        raise InvalidValue(f"reduction: order={order!r} is not a named order; use one of {', '.join(_ORDER_FNS)}")
    return _in_order(order, op, [np.asarray(p) for p in parts])


# ---------------------------------------------------------------------------
# the per-element judgement


@dataclasses.dataclass
class _Judgement:
    """Per element of one result: did it pass, how it was checked, and its
    error and bound (bound 0 for bit-for-bit elements)."""

    ok: np.ndarray
    exact: np.ndarray
    error: np.ndarray
    bound: np.ndarray
    expected: np.ndarray  # what to show: the reference value (the exact value where known)

    @property
    def ratio(self) -> np.ndarray:
        """error / bound; 0 for a passing bit-for-bit element, inf for a
        failing one, or for one that fails for another reason (a sign)."""
        with np.errstate(all="ignore"):
            r = np.where(self.bound > 0, self.error / np.where(self.bound > 0, self.bound, 1), 0.0)
        r = np.where(np.isinf(self.bound), 0.0, r)  # an unbounded check (possible overflow) passes anything
        failed = np.where(self.exact | (r <= 1), np.inf, r)
        return np.where(self.ok, np.where(self.exact, 0.0, r), failed)


def _same(got: np.ndarray, ref: np.ndarray, by_value: bool = False) -> np.ndarray:
    """Per element: the same bits (or both NaN, per component); with
    ``by_value`` equal numbers count as the same (``-0 == +0``)."""
    if got.dtype.kind not in "fc":
        return got == ref
    if got.dtype.kind == "c":
        return _same(got.real, ref.real, by_value) & _same(got.imag, ref.imag, by_value)
    both_nan = np.isnan(got) & np.isnan(ref)
    if by_value:
        return (got == ref) | both_nan
    bits = np.dtype(f"u{got.dtype.itemsize}")
    return (got.view(bits) == ref.view(bits)) | both_nan


def _abs_diff(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    if got.dtype.kind == "b":
        return (got != ref).astype(np.float64)
    with quiet_fp():
        if got.dtype.kind in "iu":  # exact in Python ints would be slower; float64 is enough to report
            return np.abs(got.astype(np.float64) - ref.astype(np.float64))
        d = np.abs(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64) - ref)
    return np.where(np.isnan(d), np.inf, d).astype(np.float64)


def _bitwise(got: np.ndarray, ref: np.ndarray, by_value: bool = False) -> _Judgement:
    ok = _same(got, ref, by_value)
    err = np.where(ok, 0.0, _abs_diff(got, ref))
    zeros = np.zeros(got.shape, np.float64)
    return _Judgement(ok, np.ones(got.shape, bool), err, zeros, ref)


def _bitwise_bytes(got: np.ndarray, ref: np.ndarray) -> _Judgement:
    """Data movement: the very bytes (NaN payloads included)."""
    if got.dtype.kind in "fc":
        bits = np.dtype(f"u{got.dtype.itemsize // (2 if got.dtype.kind == 'c' else 1)}")
        per = got.dtype.itemsize // bits.itemsize
        ok = (got.view(bits) == ref.view(bits)).reshape(got.size, per).all(axis=1)
    else:
        ok = got == ref
    return _Judgement(ok, np.ones(got.shape, bool), np.where(ok, 0.0, _abs_diff(got, ref)), np.zeros(got.shape), ref)


def _lsb_exponents(x: np.ndarray) -> np.ndarray:
    """Per element of the float64 array ``x`` (finite), ``e`` with the lowest
    set bit of ``|x|`` worth ``2**e``; a large number for zeros."""
    m, e = np.frexp(x)
    sig = np.abs(np.ldexp(m, 53)).astype(np.int64)  # the integer significand
    low = (sig & -sig).astype(np.float64)
    tz = np.frexp(low)[1] - 1
    return np.where(sig == 0, 1 << 20, e.astype(np.int64) - 53 + tz)


def _exactly_summable(x: np.ndarray, total: np.ndarray, precision: int) -> np.ndarray:
    """Per column of ``x`` (N, M): every partial sum, in every order, is
    representable with ``precision`` bits (given ``total`` = the column's
    ``sum |x_i|`` computed in double: it is >= 2**(p+e) iff the exact one is,
    since rounding is monotone and powers of two are representable)."""
    if x.shape[0] == 0:
        return np.ones(x.shape[1:], bool)
    emin = _lsb_exponents(x).min(axis=0)
    with np.errstate(over="ignore"):
        return total < np.ldexp(1.0, np.minimum(emin + precision, 1 << 16))


def _fsum_exact(values: list[float]) -> float:
    try:
        return math.fsum(values)
    except OverflowError:  # beyond the double range: do it in rationals
        return _to_float(sum(map(Fraction, values), Fraction(0)))


def _fsums(rows: list[list[float]]) -> list[float]:
    """:func:`_fsum_exact` of each row (fast when nothing overflows)."""
    try:
        return list(map(math.fsum, rows))
    except OverflowError:
        return [_fsum_exact(row) for row in rows]


def _to_float(q: Fraction) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _sum_component(x: np.ndarray, r: np.ndarray, fold_ref: np.ndarray, dtype: np.dtype,
                   k: int, mean: bool) -> _Judgement:
    """Judge one real component of a ``sum``/``mean``: ``x`` (N, M) float64
    inputs, ``r`` (M,) float64 results, ``fold_ref`` the fold's result."""
    n, m = x.shape
    info = np.finfo(dtype)
    u, eta, fmax = unit_roundoff(dtype), float(info.smallest_subnormal), float(info.max)
    ok = np.zeros(m, bool)
    exact = np.zeros(m, bool)
    error = np.zeros(m)
    bound = np.zeros(m)
    expected = fold_ref.astype(np.float64).copy()

    finite_in = np.isfinite(x).all(axis=0)
    # -- non-finite inputs: the IEEE class of the exact operation
    if not finite_in.all():
        bad = ~finite_in
        nan = np.isnan(x).any(axis=0) | ((x == np.inf).any(axis=0) & (x == -np.inf).any(axis=0))
        pinf = ~nan & (x == np.inf).any(axis=0)
        want = np.where(nan, np.nan, np.where(pinf, np.inf, -np.inf))
        match = np.where(nan, np.isnan(r), r == want)
        # the finite terms may overflow to the other infinity in some order: a NaN
        finite_total = np.where(np.isfinite(x), np.abs(x), 0.0).sum(axis=0)
        match |= np.isnan(r) & (finite_total * (1 + gamma(k, dtype)) >= fmax * (1 - 2.0**-40))
        ok[bad], exact[bad], expected[bad] = match[bad], True, want[bad]
        error[bad] = np.where(match[bad], 0.0, np.inf)
    cols = np.flatnonzero(finite_in)
    if cols.size == 0:
        return _Judgement(ok, exact, error, bound, expected)
    xf, rf = x[:, cols], r[cols]
    with quiet_fp():
        total = np.abs(xf).sum(axis=0)
        s = xf.sum(axis=0)
        in_double = _exactly_summable(xf, total, 53)
        in_dtype = _exactly_summable(xf, total, info.nmant + 1) & (total <= fmax)
        # |r - S| (|N r - S| / N for mean; N r is exact for float16/32): exact S in
        # double where the terms span < 53 bits (for float64 those elements are exact)
        err = np.abs(n * rf - s) / n if mean else np.abs(rf - s)
    hard = np.flatnonzero(~in_double & np.isfinite(rf))  # else correctly rounded, with fsum:
    if hard.size:  # fsum([r]*N - x) / N = r - S/N for mean, fsum([r] - x) = r - S for sum
        rows = np.concatenate([np.repeat(rf[None, hard], n if mean else 1, axis=0), -xf[:, hard]]).T
        err[hard] = np.abs(np.array(_fsums(rows.tolist()))) / (n if mean else 1)
        total[hard] = _fsums(np.abs(xf[:, hard]).T.tolist())

    # -- bit for bit where every order is exact
    same = _same(rf.astype(dtype), fold_ref[cols])
    g = gamma(k, dtype)
    rel = (g + u * (1 + g)) / n if mean else g
    b = rel * total * _MARGIN + n * eta
    # a computed partial sum is at most (1 + gamma) sum |x_i| in magnitude
    may_overflow = total * (1 + g) >= fmax * (1 - 2.0**-40)
    nonfinite_r = ~np.isfinite(rf)
    passed = np.where(in_dtype, same, np.where(nonfinite_r, may_overflow, err <= b))
    for j in np.flatnonzero(~in_double & ~passed):  # the exact sum, to show where it failed
        s[j] = _fsum_exact(xf[:, j].tolist())
    ok[cols] = passed
    exact[cols] = in_dtype
    bound[cols] = np.where(in_dtype, 0.0, b)
    error[cols] = np.where(in_dtype, np.where(same, 0.0, _abs_diff(rf, fold_ref[cols].astype(np.float64))),
                           np.where(nonfinite_r & ~may_overflow, np.inf, np.where(nonfinite_r, 0.0, err)))
    expected[cols] = np.where(in_dtype, expected[cols], s / n if mean else s)
    return _Judgement(ok, exact, error, bound, expected)


def _sum_judge(parts: list[np.ndarray], got: np.ndarray, op: str, k: int) -> _Judgement:
    dtype = got.dtype
    fold_ref = _fold(op, parts, np.empty_like(got))
    mean = op == "mean"
    if dtype.kind == "f":
        x = np.stack([p.astype(np.float64) for p in parts])
        return _sum_component(x, got.astype(np.float64), fold_ref, dtype, k, mean)
    real_dt = np.dtype(f"f{dtype.itemsize // 2}")
    judged = []
    for part in ("real", "imag"):
        x = np.stack([getattr(p, part).astype(np.float64) for p in parts])
        r = getattr(got, part).astype(np.float64)
        judged.append(_sum_component(x, r, getattr(fold_ref, part), real_dt, k, mean))
    re, im = judged
    expected = np.empty(got.shape, np.complex128)
    expected.real, expected.imag = re.expected, im.expected
    with np.errstate(all="ignore"):
        ratio_re, ratio_im = re.ratio, im.ratio
    worse = ratio_im > ratio_re  # report the worse component's error and bound
    return _Judgement(
        re.ok & im.ok, re.exact & im.exact,
        np.where(worse, im.error, re.error), np.where(worse, im.bound, re.bound), expected,
    )


def _scaled(n: int, e: int) -> float:
    """``n * 2**e`` as a float (inf on overflow), correct to ~2**-60."""
    bits = abs(n).bit_length()
    if bits > 64:
        n, e = n >> (bits - 64), e + bits - 64
    try:
        return math.ldexp(float(n), e)
    except OverflowError:
        return math.copysign(math.inf, n)


def _int_parts(x: np.ndarray) -> tuple[list[int], list[int]]:
    """Each finite float64 of ``x`` as ``(significand, exponent)`` Python ints."""
    m, e = np.frexp(x)
    return np.ldexp(m, 53).astype(np.int64).tolist(), (e.astype(np.int64) - 53).tolist()


def _exp2(v: float) -> float:
    return math.inf if v > 1023.5 else 2.0**v


def _prod_real(parts: list[np.ndarray], got: np.ndarray) -> _Judgement:
    """Judge a real ``prod`` (see the module docstring for the bound)."""
    dtype, n = got.dtype, len(parts)
    info = np.finfo(dtype)
    eta, fmax, tiny = float(info.smallest_subnormal), float(info.max), float(info.tiny)
    fold_ref = _fold("prod", parts, np.empty_like(got))
    same_fold = _same(got, fold_ref)
    x = np.stack([p.astype(np.float64) for p in parts])
    r = got.astype(np.float64)
    m = x.shape[1]
    ok, exact = np.zeros(m, bool), np.zeros(m, bool)
    error, bound = np.zeros(m), np.zeros(m)
    expected = fold_ref.astype(np.float64)
    with quiet_fp():
        a = np.abs(x)
        negative = np.signbit(x).sum(axis=0) % 2 == 1  # the sign of every IEEE product
        has_nan, has_inf, has_zero = np.isnan(x).any(axis=0), np.isinf(x).any(axis=0), (x == 0).any(axis=0)
        logs = np.log2(np.where((a > 0) & np.isfinite(a), a, 1.0))
        log_big = np.where(logs > 0, logs, 0.0).sum(axis=0)  # log2 Pbig
        log_small = np.where(logs < 0, logs, 0.0).sum(axis=0)  # log2 of the smallest partial product
    g = gamma(n - 1, dtype)
    # computed partial products are within a factor (1 + gamma) of the exact ones
    slop = 2 * math.log1p(g) / math.log(2) + 1e-6
    may_overflow = log_big + slop >= math.log2(fmax)
    may_underflow = log_small - slop < math.log2(tiny)
    sign_ok = np.signbit(r) == negative
    for j in range(m):
        if has_nan[j] or has_inf[j]:  # the IEEE class of the exact product
            want = math.nan if has_nan[j] or has_zero[j] else (-math.inf if negative[j] else math.inf)
            ok[j] = math.isnan(r[j]) if math.isnan(want) else r[j] == want
            # the finite factors may underflow to 0 in some order: inf * 0 is a NaN
            ok[j] = ok[j] or (math.isnan(r[j]) and bool(may_underflow[j]))
            exact[j], expected[j], error[j] = True, want, 0.0 if ok[j] else math.inf
        elif not math.isfinite(r[j]):  # finite inputs: only an overflow explains it (inf * 0 a NaN)
            if math.isnan(r[j]):
                ok[j] = may_overflow[j] and (has_zero[j] or may_underflow[j])
            else:
                ok[j] = may_overflow[j] and sign_ok[j]
            error[j] = 0.0 if ok[j] else math.inf
        elif has_zero[j] and not may_overflow[j]:  # exactly a zero, of the XOR sign
            exact[j] = True
            ok[j] = same_fold[j]
            error[j] = 0.0 if ok[j] else abs(r[j])
        else:
            sig, exp = _int_parts(x[:, j])
            p_int, p_exp = math.prod(sig), sum(exp)
            odd = math.prod(abs(v) >> ((abs(v) & -abs(v)).bit_length() - 1) for v in sig if v)
            if not (may_overflow[j] or may_underflow[j]) and odd.bit_length() <= info.nmant + 1:
                exact[j] = True  # every partial product is representable
                ok[j] = same_fold[j]
                error[j] = 0.0 if ok[j] else abs(r[j] - expected[j])
                continue
            (r_sig,), (r_exp,) = _int_parts(r[j:j + 1])
            e0 = min(r_exp, p_exp)
            diff = (r_sig << (r_exp - e0)) - (p_int << (p_exp - e0))
            err, p_abs = abs(_scaled(diff, e0)), abs(_scaled(p_int, p_exp))
            slack = (n - 1) * eta * _exp2(log_big[j]) if may_underflow[j] else n * eta
            b = g * p_abs * _MARGIN + slack
            ok[j] = err <= b and sign_ok[j]
            error[j], bound[j] = err, b
            expected[j] = _scaled(p_int, p_exp)
    return _Judgement(ok, exact, error, bound, expected)


def _gaussian(z: complex) -> tuple[int, int, int]:
    """Finite ``z`` as ``(a + b*i) * 2**e`` with Python ints."""
    (sa, sb), (ea, eb) = _int_parts(np.array([z.real, z.imag]))
    if not (sa or sb):
        return 0, 0, 0
    e = min(ea if sa else eb, eb if sb else ea)
    return (sa << (ea - e)) if sa else 0, (sb << (eb - e)) if sb else 0, e


def _prod_complex(parts: list[np.ndarray], got: np.ndarray) -> _Judgement:
    """Judge a complex ``prod`` (see the module docstring for the bound)."""
    n = len(parts)
    real_dt = np.dtype(f"f{got.dtype.itemsize // 2}")
    info = np.finfo(real_dt)
    eta, fmax = float(info.smallest_subnormal), float(info.max)
    mu = math.sqrt(2) * gamma(2, real_dt)
    log_grow = (n - 1) * math.log1p(mu) / math.log(2)  # log2 (1 + mu)**(N-1)
    rel = math.expm1((n - 1) * math.log1p(mu))  # (1 + mu)**(N-1) - 1, without cancellation
    x = np.stack([p.astype(np.complex128) for p in parts])
    r = got.astype(np.complex128)
    m = x.shape[1]
    ok, exact = np.zeros(m, bool), np.zeros(m, bool)
    error, bound = np.zeros(m), np.zeros(m)
    expected = _fold("prod", parts, np.empty_like(got)).astype(np.complex128)
    with quiet_fp():
        finite_in = np.isfinite(x).all(axis=0)
        log_big = np.log2(np.maximum(np.abs(x), 1.0)).sum(axis=0)
    r_finite = np.isfinite(r)
    # the components of each partial product are at most sqrt(2) |partial product|
    may_overflow = log_big + 0.5 + log_grow + 1e-6 >= math.log2(fmax)
    for j in range(m):
        if not finite_in[j]:  # loose: some component is not finite
            ok[j] = not r_finite[j]
            error[j] = 0.0 if ok[j] else math.inf
        elif not r_finite[j]:
            ok[j] = may_overflow[j]
            error[j] = 0.0 if ok[j] else math.inf
        else:
            pa, pb, pe = 1, 0, 0
            for z in x[:, j].tolist():
                a, b, e = _gaussian(z)
                pa, pb, pe = pa * a - pb * b, pa * b + pb * a, pe + e
            ra, rb, re_ = _gaussian(complex(r[j]))
            e0 = min(re_, pe)
            da, db = (ra << (re_ - e0)) - (pa << (pe - e0)), (rb << (re_ - e0)) - (pb << (pe - e0))
            err = math.hypot(_scaled(da, e0), _scaled(db, e0))
            p_abs = math.hypot(_scaled(pa, pe), _scaled(pb, pe))
            slack = 2 * (n - 1) * eta * _exp2(log_big[j] + log_grow) + n * eta
            b = rel * p_abs * _MARGIN + slack
            ok[j] = err <= b
            error[j], bound[j] = err, b
            expected[j] = complex(_scaled(pa, pe), _scaled(pb, pe))
    return _Judgement(ok, exact, error, bound, expected)


def _judge(op: str, parts: list[np.ndarray], got: np.ndarray, order: str | None) -> _Judgement:
    """Judge one result (an array of the right dtype and shape) of reducing
    ``parts`` with ``op``; every array of the judgement is flat."""
    n = len(parts)
    flat_parts = [np.ascontiguousarray(p).reshape(-1) for p in parts]
    flat = np.ascontiguousarray(got).reshape(-1)
    kind = got.dtype.kind
    if order in _ORDER_FNS:
        return _bitwise(flat, _in_order(order, op, flat_parts))
    if kind in "biu" or op in _EXACT_OPS or n == 1:
        ref = _fold(op, flat_parts, np.empty_like(flat))
        return _bitwise(flat, ref, by_value=op in ("min", "max") and kind == "f")
    if op in ("sum", "mean"):
        return _sum_judge(flat_parts, flat, op, _depth(order, n))
    if kind == "c":
        return _prod_complex(flat_parts, flat)
    return _prod_real(flat_parts, flat)


# ---------------------------------------------------------------------------
# check: shapes, None, ranks, and the verdict


def _show(value) -> str:
    """A number as its shortest round-trip string (numpy scalars without their type)."""
    value = value.item() if isinstance(value, np.generic) else value
    return repr(value)


def _structure(rank: int, collective: str, got, want_dtype, want_shape) -> str:
    """'' if ``got`` is an array of ``want_dtype`` and ``want_shape`` (None
    when ``want_shape`` is None), else what is wrong."""
    if want_shape is None:
        return "" if got is None else (
            f"rank {rank}: {collective} returned {type(got).__name__} where the contract says None"
        )
    if not isinstance(got, np.ndarray):
        return f"rank {rank}: {collective} returned {type(got).__name__}, not a numpy array of shape {want_shape}"
    if got.dtype != want_dtype:
        return f"rank {rank}: {collective} returned dtype {got.dtype}; the contract says {want_dtype}"
    if got.shape != want_shape:
        return f"rank {rank}: {collective} returned shape {got.shape}; the contract says {want_shape}"
    return ""


def _describe(rank: int, judged: _Judgement, got: np.ndarray, shape: tuple) -> str:
    bad = np.flatnonzero(~judged.ok)
    if bad.size == 0:
        return ""
    ratio = judged.ratio
    j = int(bad[np.argmax(ratio[bad])])
    where = f"element {tuple(map(int, np.unravel_index(j, shape))) if len(shape) > 1 else j}"
    head = (f"rank {rank}: {bad.size} of {judged.ok.size} element(s) wrong; worst {where}: "
            f"got {_show(got.reshape(-1)[j])}")
    expected = _show(judged.expected[j])
    if judged.exact[j] or not math.isfinite(judged.error[j]) or judged.bound[j] == 0:
        return f"{head}, expected {expected}" + (" (bit for bit)" if judged.exact[j] else "")
    return (f"{head}, exact value {expected}: |error| {judged.error[j]:.3g} > bound "
            f"{judged.bound[j]:.3g} (ratio {float(judged.error[j]) / float(judged.bound[j]):.3g})")


def _as_array(x, rank: int, collective: str) -> np.ndarray:
    if x is None:
        raise InvalidType(f"check: {collective}: inputs[{rank}]=None; rank {rank} must pass an array")
    x = np.asarray(x)
    if x.dtype not in DTYPES:
        raise InvalidType(f"check: {collective}: inputs[{rank}] has dtype {x.dtype}, which collectives do not carry")
    return x


def _validate(collective, inputs, outputs, op, root, order) -> int:
    if collective not in COLLECTIVES:
        raise InvalidValue(f"check: collective={collective!r} is not a collective; use one of {', '.join(COLLECTIVES)}")
    if len(inputs) != len(outputs) or not inputs:
        raise InvalidValue(
            f"check: {collective}: len(inputs)={len(inputs)} and len(outputs)={len(outputs)}; pass one "
            f"input and one output per rank (at least one rank)"
        )
    n = len(inputs)
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise InvalidValue(f"check: {collective}: root={root!r} must be an int rank in 0..{n - 1}")
    if order is not None:
        if collective not in _REDUCTIONS:
            raise InvalidValue(f"check: {collective}: order={order!r} only applies to reductions; pass order=None")
        if order not in ORDERS:
            raise InvalidValue(f"check: order={order!r} is not a known order; use None or one of {', '.join(ORDERS)}")
    if collective in _REDUCTIONS and op not in OPS:
        raise InvalidValue(f"check: {collective}: op={op!r} is not a reduction op; use one of {', '.join(OPS)}")
    return n


def _inputs(collective: str, inputs: Sequence, op: str, root: int, n: int) -> dict[int, np.ndarray]:
    """The inputs that matter, as arrays (root's only for broadcast and
    scatter), checked to be one dtype and shape that the call can take."""
    ranks = [root] if collective in ("broadcast", "scatter") else range(n)
    xs = {r: _as_array(inputs[r], r, collective) for r in ranks}
    dtype, shape = xs[root].dtype, xs[root].shape
    for r, x in xs.items():
        if x.dtype != dtype or x.shape != shape:
            raise InvalidValue(
                f"check: {collective}: inputs[{r}] has dtype {x.dtype} and shape {x.shape} but inputs[{root}] "
                f"{dtype} and {shape}; every rank passes the same dtype and shape"
            )
    if collective in ("reduce_scatter", "scatter", "alltoall") and (len(shape) == 0 or shape[0] != n):
        raise InvalidValue(f"check: {collective}: inputs have shape {shape}; they must have shape ({n}, ...)")
    if collective in _REDUCTIONS and not accepts(op, dtype):
        raise InvalidType(f"check: {collective}: op={op!r} is not defined on dtype {dtype}")
    return xs


def _shapes(collective: str, shape: tuple, n: int, root: int) -> dict[int, tuple | None]:
    """The shape each rank's result must have, None where it must be None."""
    per_rank = {
        "allreduce": shape, "broadcast": shape, "alltoall": shape,
        "reduce": shape, "reduce_scatter": shape[1:], "scatter": shape[1:],
        "allgather": (n, *shape), "gather": (n, *shape),
    }[collective]
    rooted = collective in ("reduce", "gather")
    return {r: per_rank if not rooted or r == root else None for r in range(n)}


def _moved(collective: str, xs: dict[int, np.ndarray], r: int, n: int, root: int) -> np.ndarray:
    """What data movement must deliver to rank ``r``."""
    if collective == "broadcast":
        return xs[root]
    if collective in ("allgather", "gather"):
        return np.stack([xs[j] for j in range(n)])
    if collective == "scatter":
        return xs[root][r]
    return np.stack([xs[j][r] for j in range(n)])  # alltoall


def check(collective: str, inputs: Sequence, outputs: Sequence, *, op: str = "sum", root: int = 0,
          order: str | None = None) -> Verdict:
    """Judge one call of ``collective``: did every rank get what the contract
    allows, given every rank's input?

    ``inputs[r]`` is what rank ``r`` passed (None where the contract allows
    it: a non-root's broadcast or scatter input); ``outputs[r]`` is what the
    backend returned on rank ``r``. ``op`` and ``order`` apply to reductions
    (``allreduce``, ``reduce``, ``reduce_scatter``), ``root`` to rooted
    collectives. ``order``: None (any order; the bound ``gamma(N-1)``),
    ``"tree"`` (any tree of depth ``ceil(log2 N)``; ``gamma(ceil(log2 N))``)
    or a named order (``"fold"``, ``"ring"``, ``"recursive_doubling"``;
    bit for bit). What is exact and what is bounded is in the module
    docstring.

    Raises :class:`simdist.InvalidValue`/:class:`simdist.InvalidType` when the
    call itself cannot be judged (an unknown collective, inputs of different
    dtypes, an op the dtype does not take); a backend's mistakes are never
    raised, they are the verdict.
    """
    n = _validate(collective, inputs, outputs, op, root, order)
    xs = _inputs(collective, inputs, op, root, n)
    dtype = xs[root].dtype
    want = _shapes(collective, xs[root].shape, n, root)
    structure = {r: _structure(r, collective, outputs[r], dtype, want[r]) for r in range(n)}
    problems = [p for p in structure.values() if p]
    well_formed = [r for r in range(n) if want[r] is not None and not structure[r]]

    ranks_identical = None
    if collective in ("allreduce", "broadcast", "allgather") and well_formed:
        blobs = {r: np.ascontiguousarray(outputs[r]).tobytes() for r in well_formed}
        ranks_identical = len(set(blobs.values())) == 1
        if not ranks_identical:
            base = well_formed[0]
            differ = [r for r in well_formed if blobs[r] != blobs[base]]
            problems.append(f"ranks disagree: rank(s) {differ} got other bits than rank {base}")

    # -- the contents; a malformed result counts as infinitely wrong
    exact_all = bool(well_formed)  # nothing judged is not "checked bit for bit"
    malformed = any(want[r] is not None and structure[r] for r in range(n))
    worst = (math.inf, math.inf, 0.0) if malformed else (0.0, 0.0, 0.0)  # (ratio, error, bound)
    seen: dict[tuple, _Judgement] = {}  # identical outputs are judged once
    full = None
    if collective == "reduce_scatter" and order in _ORDER_FNS:  # block r of the ordered allreduce
        full = _in_order(order, op, [xs[j] for j in range(n)])
    for r in well_formed:
        got = np.ascontiguousarray(outputs[r])
        flat = got.reshape(-1)
        if full is not None:
            judged = _bitwise(flat, full[r].reshape(-1))
        elif collective in _REDUCTIONS:
            key = (r if collective == "reduce_scatter" else -1, got.tobytes())
            if key not in seen:
                parts = [xs[j][r] if collective == "reduce_scatter" else xs[j] for j in range(n)]
                seen[key] = _judge(op, parts, got, order)
            judged = seen[key]
        else:
            judged = _bitwise_bytes(flat, np.ascontiguousarray(_moved(collective, xs, r, n, root)).reshape(-1))
        exact_all &= bool(judged.exact.all())
        if judged.ok.size:
            ratio = judged.ratio
            top = np.flatnonzero(ratio == ratio.max())
            j = int(top[np.argmax(judged.error[top])])  # the largest ratio, then the largest error
            worst = max(worst, (float(ratio[j]), float(judged.error[j]), float(judged.bound[j])))
        if (p := _describe(r, judged, got, want[r])):
            problems.append(p)
    ratio, max_error, bound = worst
    return Verdict(
        collective=collective,
        dtype=str(dtype),
        op=op if collective in _REDUCTIONS else None,
        size=n,
        order=order,
        ok=not problems,
        exact=exact_all,
        max_error=max_error,
        bound=bound,
        ratio=ratio,
        ranks_identical=ranks_identical,
        reason="; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else ""),
    )
