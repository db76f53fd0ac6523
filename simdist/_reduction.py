"""Reduction ops and the canonical fold.

The simulator's determinism promise lives here: a reduction is the
rank-ascending left fold ``((x0 op x1) op x2) ...`` element by element in the
input dtype, and ``mean`` is that sum divided by the number of ranks. Any
slicing of the elements gives the same bits, because every element sees the
same operations in the same order; so ranks may fold disjoint slices in
parallel. Complex ``prod`` and ``mean`` are spelled out in real operations,
each rounded on its own, because numpy's complex loops differ by layout.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._bfloat16 import kind_of
from ._communicator import OPS

__all__ = ["OPS", "LOGICAL", "ops_for", "accepts", "fold", "fold_in_blocks", "fold_rows", "fold_ufunc", "fold_with",
           "divide_mean", "quiet_fp"]

_INT_KINDS = "iu"
_FLOAT_KINDS = "f"
_COMPLEX_KINDS = "c"

# op -> dtype kinds it accepts ('b' bool, 'i'/'u' integers, 'f' floats, 'c' complex)
_ACCEPTS = {
    "sum": "iufc",
    "prod": "iufc",
    "mean": "fc",
    "min": "biuf",
    "max": "biuf",
    "band": "biu",
    "bor": "biu",
    "bxor": "biu",
    "land": "biu",
    "lor": "biu",
    "lxor": "biu",
}

_UFUNC = {
    "sum": np.add,
    "mean": np.add,
    "prod": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "band": np.bitwise_and,
    "bor": np.bitwise_or,
    "bxor": np.bitwise_xor,
    "land": np.logical_and,
    "lor": np.logical_or,
    "lxor": np.logical_xor,
}

#: The logical ops: on integers they give 0/1 in the input dtype, as MPI_LAND does.
LOGICAL = frozenset(("land", "lor", "lxor"))

try:  # numpy >= 2: switch floating-point error handling off for ~100 ns
    from numpy._core._multiarray_umath import _extobj_contextvar, _make_extobj

    _QUIET = _make_extobj(all="ignore")
    _quiet_on = _extobj_contextvar.set
    _quiet_off = _extobj_contextvar.reset

    class _Quiet:
        __slots__ = ("_token",)

        def __enter__(self):
            self._token = _extobj_contextvar.set(_QUIET)

        def __exit__(self, *exc):
            _extobj_contextvar.reset(self._token)

    def quiet_fp():
        """Context in which IEEE exceptions (inf - inf, overflow) stay silent."""
        return _Quiet()

except ImportError:  # pragma: no cover - older numpy
    _QUIET = None

    def _quiet_on(_):
        state = np.seterr(all="ignore")
        return state

    def _quiet_off(state):
        np.seterr(**state)

    def quiet_fp():
        return np.errstate(all="ignore")


def ops_for(dtype: np.dtype) -> tuple[str, ...]:
    """The reduction ops defined on ``dtype``."""
    return tuple(op for op in OPS if kind_of(dtype) in _ACCEPTS[op])


def accepts(op: str, dtype: np.dtype) -> bool:
    return kind_of(dtype) in _ACCEPTS[op]


def fold(op: str, parts: Sequence[np.ndarray], out: np.ndarray, size: int | None = None) -> np.ndarray:
    """Fold ``parts`` (in order) with ``op`` into ``out``; return ``out``.

    ``parts`` are arrays of ``out``'s dtype and shape, one per rank in rank
    order. ``size`` divides the sum for ``mean`` (default ``len(parts)``).
    ``out`` may be ``parts[0]`` or ``parts[1]`` but no other part.
    """
    divisor = (len(parts) if size is None else size) if op == "mean" else None
    ufunc = fold_ufunc(op, out.dtype)
    if ufunc is not None:
        fold_with(ufunc, parts, out, divisor)
    elif op in LOGICAL:
        _fold_logical(op, parts, out)
    elif op == "prod":
        _fold_complex_product(parts, out)
    else:  # complex mean
        divide_mean(fold_with(np.add, parts, out), divisor)
    return out


def divide_mean(total: np.ndarray, size: int) -> np.ndarray:
    """The division that makes a sum a mean: ``total / size`` in place, in
    ``total``'s dtype, IEEE exceptions silent; returns ``total``.

    A complex total has each component divided by the (real) size, so each
    is the correctly rounded quotient (numpy's complex division by a complex
    ``size + 0j`` is not)."""
    with quiet_fp():
        if total.dtype.kind == "c":
            np.divide(total.real, size, out=total.real)
            np.divide(total.imag, size, out=total.imag)
        else:
            np.divide(total, size, out=total)
    return total


#: fold_in_blocks folds this many bytes of each part at a time.
FOLD_BLOCK_BYTES = 256 << 10


def fold_in_blocks(op: str, parts: Sequence[np.ndarray], out: np.ndarray, size: int | None = None,
                   also: np.ndarray | None = None) -> np.ndarray:
    """:func:`fold` of 1-d ``parts``, one block of elements at a time: the
    same operations on each element, so the same bits, while the block of
    ``out`` stays in the cache from one part to the next (with 4 parts of
    2 MiB: 392 us against 469 in one piece). With ``also``, each folded
    block is copied there too while it is still in the cache."""
    step = max(1, FOLD_BLOCK_BYTES // out.itemsize)
    if also is None and (len(parts) <= 2 or out.size <= step):
        return fold(op, parts, out, size)
    for lo in range(0, out.size, step):
        block = out[lo : lo + step]
        fold(op, [p[lo : lo + step] for p in parts], block, size)
        if also is not None:
            also[lo : lo + step] = block
    return out


def fold_ufunc(op: str, dtype: np.dtype):
    """The one ufunc that folds ``op`` on ``dtype``, or None where the fold
    needs more (logical ops on integers, complex mean and product)."""
    if (op in LOGICAL and dtype.kind != "b") or (dtype.kind == "c" and op in ("mean", "prod")):
        return None
    return _UFUNC[op]


def fold_with(ufunc, parts, out, divisor=None) -> np.ndarray:
    """The left fold of ``parts`` with ``ufunc`` into ``out``, then the
    division by ``divisor`` if given; IEEE exceptions stay silent."""
    token = _quiet_on(_QUIET)
    try:
        if len(parts) == 1:
            np.copyto(out, parts[0])
        else:
            ufunc(parts[0], parts[1], out=out)
        _fold_rest(ufunc, parts[2:], out, divisor)
    finally:
        _quiet_off(token)
    return out


def fold_new(ufunc, parts, divisor=None) -> np.ndarray:
    """:func:`fold_with` into a new array (one numpy call fewer for small ones)."""
    if len(parts) == 1:
        return fold_with(ufunc, parts, np.empty_like(parts[0]), divisor)
    token = _quiet_on(_QUIET)
    try:
        out = ufunc(parts[0], parts[1])
        if type(out) is not np.ndarray:  # 0-d inputs give a numpy scalar
            out = np.array(out)
        if len(parts) > 2 or divisor is not None:
            _fold_rest(ufunc, parts[2:], out, divisor)
    finally:
        _quiet_off(token)
    return out


def fold_rows(ufunc, rows: np.ndarray, divisor=None) -> np.ndarray:
    """:func:`fold_new` of ``rows[0], rows[1], ...`` in one numpy call.

    ``accumulate`` along the first axis computes ``acc[i] = ufunc(acc[i-1],
    rows[i])`` in row order, each element on its own: the fold's operations
    in the fold's order, so the same bits. For many small parts one call
    costs less than one call per part (16 rows of 2 float32: 2.5 us against
    11 us); for a few parts it costs more.
    """
    token = _quiet_on(_QUIET)
    try:
        out = np.array(ufunc.accumulate(rows, axis=0, dtype=rows.dtype)[-1])
        if divisor is not None:
            np.divide(out, divisor, out=out)
    finally:
        _quiet_off(token)
    return out


def _fold_rest(ufunc, rest, out, divisor) -> None:
    for part in rest:
        ufunc(out, part, out=out)
    if divisor is not None:
        np.divide(out, divisor, out=out)


def _fold_complex_product(parts, out) -> None:
    # numpy's complex multiply takes different loops (with and without fused
    # multiply-add) depending on length and aliasing, so its bits depend on
    # the layout. The product is defined instead by the textbook formula,
    # each real operation rounded on its own:
    #   (a + bi)(c + di) = (ac - bd) + (ad + bc)i
    if len(parts) > 1 and np.may_share_memory(out, parts[1]):  # a bounds check, not an exact solve
        parts = [parts[0], parts[1].copy(), *parts[2:]]  # out is overwritten first
    token = _quiet_on(_QUIET)
    try:
        np.copyto(out, parts[0])
        re, im = out.real, out.imag
        t1, t2 = np.empty_like(re), np.empty_like(re)
        for part in parts[1:]:
            c, d = part.real, part.imag
            np.multiply(re, c, out=t1)
            np.multiply(im, d, out=t2)
            np.subtract(t1, t2, out=t1)  # ac - bd
            np.multiply(re, d, out=t2)
            np.multiply(im, c, out=im)
            np.add(t2, im, out=im)  # ad + bc
            np.copyto(re, t1)
    finally:
        _quiet_off(token)


def _fold_logical(op, parts, out):
    # Logical ops on integers give 0/1 in the input dtype, as MPI_LAND does.
    acc = np.not_equal(parts[0], 0)
    for part in parts[1:]:
        _UFUNC[op](acc, np.not_equal(part, 0), out=acc)
    np.copyto(out, acc, casting="unsafe")
