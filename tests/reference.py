"""Reference semantics for the tests: inputs rebuilt from ``(seed, rank)`` and
the canonical fold computed with plain numpy, compared to the bit."""

from __future__ import annotations

import functools
import warnings

import numpy as np

LOGICAL = ("land", "lor", "lxor")
UFUNC = {
    "sum": np.add, "mean": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
    "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
}


def _floats(rng, dtype, shape, zeros):
    """Values of mixed magnitude and sign, so that the order of a sum matters."""
    span = {2: 6, 4: 24, 8: 60}[np.dtype(dtype).itemsize]
    mantissa = rng.uniform(1.0, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    x = np.ldexp(mantissa, rng.integers(-span, span + 1, shape))
    if zeros:
        x = np.where(rng.random(shape) < zeros, 0.0, x)
    return np.asarray(x).astype(dtype)


def values(dtype, shape, seed, rank=0, zeros=0.05) -> np.ndarray:
    """A deterministic array for ``(seed, rank)``; the same in every process."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng([seed, rank, dt.num])
    if dt.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        return np.asarray(np.where(rng.random(shape) < 0.25, 0, x)).astype(dt)
    if dt.kind == "f":
        return _floats(rng, dt, shape, zeros)
    part = np.dtype(f"f{dt.itemsize // 2}")
    x = np.empty(shape, dt)
    x.real = _floats(rng, part, shape, zeros)
    x.imag = _floats(rng, part, shape, zeros)
    return x


def left_fold(op, xs) -> np.ndarray:
    """The reference: ``((x0 op x1) op x2) ...`` in the input dtype; ``mean``
    is that sum divided by ``len(xs)``, component by component for complex;
    complex ``prod`` is ``(ac - bd) + (ad + bc)i``, each operation rounded."""
    xs = [np.asarray(x) for x in xs]
    dt, shape = xs[0].dtype, xs[0].shape
    flat = [x.reshape(-1) for x in xs]
    with np.errstate(all="ignore"):
        if op in LOGICAL:
            acc = flat[0] != 0
            for x in flat[1:]:
                acc = UFUNC[op](acc, x != 0)
            acc = acc.astype(dt)
        elif op == "prod" and dt.kind == "c":  # the textbook formula, no fused multiply-add
            acc = flat[0].copy()
            for x in flat[1:]:
                re = acc.real * x.real - acc.imag * x.imag
                im = acc.real * x.imag + acc.imag * x.real
                acc = np.empty_like(acc)
                acc.real, acc.imag = re, im
        else:
            acc = flat[0].copy()
            for x in flat[1:]:
                acc = UFUNC[op](acc, x)
            if op == "mean":
                n = len(xs)
                if dt.kind == "c":
                    quotient = np.empty_like(acc)
                    quotient.real = acc.real / acc.real.dtype.type(n)
                    quotient.imag = acc.imag / acc.imag.dtype.type(n)
                    acc = quotient
                else:
                    acc = acc / dt.type(n)
    assert acc.dtype == dt
    return acc.reshape(shape)


def assert_bits(actual, expected, what=""):
    """``actual`` is an ndarray of ``expected``'s dtype and shape, with its bits."""
    assert type(actual) is np.ndarray, f"{what}: got {type(actual).__name__}, not an ndarray"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.tobytes() != expected.tobytes():
        a, e = actual.reshape(-1), expected.reshape(-1)
        bad = [i for i in range(a.size) if a[i:i + 1].tobytes() != e[i:i + 1].tobytes()]
        raise AssertionError(
            f"{what}: {len(bad)} of {a.size} elements differ in their bits; first at flat index "
            f"{bad[0]}: got {a[bad[0]]!r}, expected {e[bad[0]]!r}"
        )


def on_rank(fn):
    """A rank function during which every warning is an error."""

    @functools.wraps(fn)
    def strict(comm, *args):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return fn(comm, *args)

    return strict
