"""The per-element judgement of a reduction's result: bit for bit, or
within the rigorous error bound.

:func:`judge` takes every rank's part and one result and says, per element,
whether it passes, whether it was checked bit for bit, and its error and
bound. The bounds, and how they are computed exactly, are written in the
docstring of :mod:`simdist.reference`; :func:`gamma` and
:func:`unit_roundoff` are their public building blocks.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from .._bfloat16 import kind_of
from .._errors import InvalidValue
from .._orders import ORDERS as NAMED_ORDERS
from .._orders import depth as _depth
from .._orders import in_order
from .._reduction import fold as _fold, quiet_fp

__all__ = ["Judgement", "judge", "bitwise", "bitwise_bytes", "gamma", "unit_roundoff"]

_EXACT_OPS = frozenset(("min", "max", "band", "bor", "bxor", "land", "lor", "lxor"))
_MARGIN = 1.0 + 2.0**-40  # for the roundings in computing the bound and the error themselves


def unit_roundoff(dtype) -> float:
    """``u = 2**-p`` of a float or complex dtype (p = 8 for bfloat16, 11, 24, 53)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def gamma(k: int, dtype) -> float:
    """``gamma(k) = k*u / (1 - k*u)`` (Higham's notation); requires ``k*u < 1``."""
    ku = k * unit_roundoff(dtype)
    if ku >= 1:
        raise InvalidValue(f"gamma: k={k} is too large for dtype {np.dtype(dtype)} (k*u >= 1)")
    return ku / (1 - ku)


@dataclasses.dataclass
class Judgement:
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
    if kind_of(got.dtype) not in "fc":
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


def bitwise(got: np.ndarray, ref: np.ndarray, by_value: bool = False) -> Judgement:
    ok = _same(got, ref, by_value)
    err = np.where(ok, 0.0, _abs_diff(got, ref))
    zeros = np.zeros(got.shape, np.float64)
    return Judgement(ok, np.ones(got.shape, bool), err, zeros, ref)


def bitwise_bytes(got: np.ndarray, ref: np.ndarray) -> Judgement:
    """Data movement: the very bytes (NaN payloads included)."""
    if kind_of(got.dtype) in "fc":
        bits = np.dtype(f"u{got.dtype.itemsize // (2 if got.dtype.kind == 'c' else 1)}")
        per = got.dtype.itemsize // bits.itemsize
        ok = (got.view(bits) == ref.view(bits)).reshape(got.size, per).all(axis=1)
    else:
        ok = got == ref
    return Judgement(ok, np.ones(got.shape, bool), np.where(ok, 0.0, _abs_diff(got, ref)), np.zeros(got.shape), ref)


def _lsb_exponents(x: np.ndarray) -> np.ndarray:
    """Per element of the float64 array ``x`` (finite), ``e`` with the lowest
    set bit of ``|x|`` worth ``2**e``; a large number for zeros."""
    m, e = np.frexp(x)
    sig = np.abs(np.ldexp(m, 53)).astype(np.int64)  # the integer significand
    low = (sig & -sig).astype(np.float64)
    tz = np.frexp(low)[1] - 1
    return np.where(sig == 0, 1 << 20, e.astype(np.int64) - 53 + tz)


def _lowest_bits(x: np.ndarray) -> np.ndarray:
    """Per column of ``x`` (N, M): the exponent of the lowest set bit over
    the column (see :func:`_lsb_exponents`); a large number for no rows."""
    if x.shape[0] == 0:
        return np.full(x.shape[1:], 1 << 20, np.int64)
    return _lsb_exponents(x).min(axis=0)


def _exactly_summable(emin: np.ndarray, total: np.ndarray, precision: int) -> np.ndarray:
    """Per column of the terms ``x`` (N, M): every partial sum, in every
    order, is representable with ``precision`` bits, given the columns'
    :func:`_lowest_bits` ``emin`` and ``total`` = their ``sum |x_i|``
    computed in double (it is >= 2**(p+e) iff the exact one is, since
    rounding is monotone and powers of two are representable)."""
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
                   k: int, mean: bool) -> Judgement:
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
        return Judgement(ok, exact, error, bound, expected)
    xf, rf = x[:, cols], r[cols]
    with quiet_fp():
        total = np.abs(xf).sum(axis=0)
        s = xf.sum(axis=0)
        emin = _lowest_bits(xf)
        in_double = _exactly_summable(emin, total, 53)
        in_dtype = _exactly_summable(emin, total, info.nmant + 1) & (total <= fmax)
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
    return Judgement(ok, exact, error, bound, expected)


def _sum_judge(parts: list[np.ndarray], got: np.ndarray, op: str, k: int) -> Judgement:
    dtype = got.dtype
    fold_ref = _fold(op, parts, np.empty_like(got))
    mean = op == "mean"
    if kind_of(dtype) == "f":
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
    return Judgement(
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


def _prod_real(parts: list[np.ndarray], got: np.ndarray) -> Judgement:
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
    return Judgement(ok, exact, error, bound, expected)


def _gaussian(z: complex) -> tuple[int, int, int]:
    """Finite ``z`` as ``(a + b*i) * 2**e`` with Python ints."""
    (sa, sb), (ea, eb) = _int_parts(np.array([z.real, z.imag]))
    if not (sa or sb):
        return 0, 0, 0
    e = min(ea if sa else eb, eb if sb else ea)
    return (sa << (ea - e)) if sa else 0, (sb << (eb - e)) if sb else 0, e


def _prod_complex(parts: list[np.ndarray], got: np.ndarray) -> Judgement:
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
    return Judgement(ok, exact, error, bound, expected)


def judge(op: str, parts: list[np.ndarray], got: np.ndarray, order: str | None) -> Judgement:
    """Judge one result (an array of the right dtype and shape) of reducing
    ``parts`` with ``op``; every array of the judgement is flat."""
    n = len(parts)
    flat_parts = [np.ascontiguousarray(p).reshape(-1) for p in parts]
    flat = np.ascontiguousarray(got).reshape(-1)
    kind = kind_of(got.dtype)
    if order in NAMED_ORDERS:
        return bitwise(flat, in_order(order, op, flat_parts))
    if kind in "biu" or op in _EXACT_OPS or n == 1:
        ref = _fold(op, flat_parts, np.empty_like(flat))
        return bitwise(flat, ref, by_value=op in ("min", "max") and kind == "f")
    if op in ("sum", "mean"):
        return _sum_judge(flat_parts, flat, op, _depth(order, n))
    if kind == "c":
        return _prod_complex(flat_parts, flat)
    return _prod_real(flat_parts, flat)


