"""The plan of a sweep: its rows, their cases, and every case's inputs.

A *row* is (collective, dtype, op); a *case* is one call of the row's
collective: a shape, a kind of data ("exact": small integers, or powers of
two for products, which every order reduces exactly, judged bit for bit;
"random": judged against the reference's bound), a root, and a repeat number
(fresh data each time). Inputs are a pure function of (seed, row id, case
index, rank): the ranks make their own, and the driver makes them again to
judge the outputs, so only outputs travel back.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np
from numpy.random.bit_generator import ISeedSequence

from .._arguments import DTYPES
from .._bfloat16 import dtype_named, kind_of
from .._communicator import BLOCKED, COLLECTIVES, REDUCTIONS, ROOTED
from .._reduction import ops_for
from ._verdict import COLLECTIVES as _CHECKED

__all__ = ["SWEEP_COLLECTIVES", "Case", "Row", "plan", "describe_case", "case_input", "messages"]

#: The rows of a sweep, in report order: the collectives that
#: :func:`simdist.reference.check` judges, then ``send_recv`` (send and recv,
#: judged by the sweep), then the contract's others (barrier).
SWEEP_COLLECTIVES = (*_CHECKED, "send_recv", *(c for c in COLLECTIVES if c not in _CHECKED))

_SMALL_SHAPES = {"0-d": (), "empty": (0,), "1": (1,), "13": (13,), "3x5 strided": (3, 5)}
_KINDS = ("exact", "random")

#: Elements of the large case, by what judging it costs: reference.check
#: judges integers, min/max, bitwise ops and data movement with numpy, float
#: sums in double or math.fsum, and products element by element in Python.
_LARGE = {"numpy": 100_003, "double": 100_003, "fsum": 30_011, "prod": 1_009, "cprod": 257}
_QUICK_LARGE = {"numpy": 10_007, "double": 10_007, "fsum": 4_001, "prod": 257, "cprod": 61}


class Case(NamedTuple):
    index: int
    shape: str  # a key of _SMALL_SHAPES, or "large"
    kind: str  # "exact" or "random"
    root: int
    repeat: int
    length: int  # elements of a "large" case


class Row(NamedTuple):
    rid: int
    collective: str
    dtype: str | None
    op: str | None
    cases: tuple

    @property
    def label(self) -> str:
        return " ".join(p for p in (self.collective, self.dtype, self.op) if p)


def _large_length(collective: str, dtype: np.dtype, op: str | None, quick: bool, n: int) -> int:
    table = _QUICK_LARGE if quick else _LARGE
    if collective in ("allgather", "gather") and n > 4:  # results of at most 4 large arrays per rank
        return table["numpy"] * 4 // n
    if op in ("sum", "mean") and kind_of(dtype) in "fc":
        return table["double" if kind_of(dtype) == "f" and dtype.itemsize <= 4 else "fsum"]
    if op == "prod" and kind_of(dtype) in "fc":
        return table["cprod" if dtype.kind == "c" else "prod"]
    return table["numpy"]


def plan(n: int, quick: bool, collectives=SWEEP_COLLECTIVES, dtypes=DTYPES, ops=None) -> list[Row]:
    """Every row of the sweep with its cases, in report order (``ops``, if
    given, narrows the reductions' rows)."""
    repeats = 1 if quick else 2
    rows: list[Row] = []
    for collective in collectives:
        if collective == "barrier":
            cases = tuple(Case(i, "-", "-", i % n, i, 0) for i in range(2 * n if quick else 4 * n))
            rows.append(Row(len(rows), collective, None, None, cases))
            continue
        roots = range(n) if collective in ROOTED else (0,)
        for dtype in dtypes:
            for op in (_ops(dtype, ops) if collective in REDUCTIONS else (None,)):
                cases = []
                for root in roots:
                    for shape in _SMALL_SHAPES:
                        for kind in _KINDS:
                            for repeat in range(repeats):
                                cases.append(Case(len(cases), shape, kind, root, repeat, 0))
                if not (collective == "send_recv" and n == 1):  # a large send to oneself may block for ever
                    # one large case where both kinds are judged bit for bit alike
                    bounded = collective in REDUCTIONS and kind_of(dtype) in "fc" and op in ("sum", "mean", "prod")
                    length = _large_length(collective, dtype, op, quick, n)
                    for kind, root in zip(_KINDS if bounded else ("random",), (n - 1, 0) if bounded else (n - 1,)):
                        cases.append(Case(len(cases), "large", kind, root, 0, length))
                rows.append(Row(len(rows), collective, str(dtype), op, tuple(cases)))
    return rows


def _ops(dtype: np.dtype, chosen) -> tuple:
    return tuple(op for op in ops_for(dtype) if chosen is None or op in chosen)


def describe_case(row: Row, case: Case, n: int) -> str:
    """The case, for a reason that follows the row's label."""
    if row.collective == "barrier":
        return f"call {case.index + 1} (rank {case.root} late)"
    shape = _element_shape(row.collective, case, n)
    parts = [f"shape {shape}" + (" non-contiguous read-only" if case.shape == "3x5 strided" else ""),
             f"{case.kind} inputs"]
    if row.collective in ROOTED:
        parts.append(f"root {case.root}")
    parts.append(f"call {case.repeat + 1}")
    return ", ".join(parts)


def _element_shape(collective: str, case: Case, n: int) -> tuple:
    """The shape each rank passes (root's, for broadcast and scatter)."""
    if case.shape == "large":
        shape = (max(1, case.length // n),) if collective in BLOCKED else (case.length,)
    else:
        shape = _SMALL_SHAPES[case.shape]
    return (n, *shape) if collective in BLOCKED else shape


def _values(rng: np.random.Generator, shape: tuple, dtype: np.dtype, role: str, kind: str) -> np.ndarray:
    """An array of ``shape``: ``role`` is the op of a reduction, or "move"."""
    count = math.prod(shape)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if kind == "random" and (role == "move" or dtype.kind in "iu"):  # any bits: NaN payloads, wrap-around
        return np.frombuffer(rng.bytes(count * dtype.itemsize), dtype).reshape(shape).copy()
    if dtype.kind in "iu":  # small integers
        return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    parts = 2 if dtype.kind == "c" else 1
    if kind == "exact":  # every order gives the exact result
        if role == "prod":
            choices = [-1.0, 0.0, 1.0] if parts == 2 else [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]
            v = rng.choice(choices, (parts, *shape))
        else:
            v = rng.integers(-16, 17, (parts, *shape)).astype(np.float64)
    elif role == "prod":  # factors of magnitude 0.5 .. 2: no overflow or underflow
        v = rng.choice([-1.0, 1.0], (parts, *shape)) * np.exp2(rng.uniform(-1, 1, (parts, *shape)))
    else:  # magnitudes over 16 binades: cancellation and rounding
        v = rng.standard_normal((parts, *shape)) * np.exp2(rng.integers(-8, 9, (parts, *shape)))
    return (v[0] + 1j * v[1] if parts == 2 else v[0]).astype(dtype)


class _CaseSeed(ISeedSequence):
    """A generator's seed words: SHAKE-128 of the case's key. The driver makes
    a generator for every rank of every case it judges; numpy's SeedSequence
    takes 20-30 µs to make one, this 4."""

    def __init__(self, key: bytes):
        self.key = key

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(hashlib.shake_128(self.key).digest(n_words * dtype.itemsize), dtype)


def _rng(seed: int, row: Row, case: Case, rank: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(_CaseSeed(b"%d %d %d %d" % (seed, row.rid, case.index, rank))))


def _array(rng, shape: tuple, dtype: np.dtype, role: str, kind: str, strided: bool) -> np.ndarray:
    if not strided:
        return _values(rng, shape, dtype, role, kind)
    base = _values(rng, (*shape[:-1], 2 * shape[-1]), dtype, role, kind)
    x = base[..., ::2]
    x.flags.writeable = False
    return x


def case_input(row: Row, case: Case, rank: int, n: int, seed: int):
    """What ``rank`` passes in a collective case (None: a non-root's broadcast
    or scatter, on even repeats; odd repeats pass an array that is ignored)."""
    dtype = dtype_named(row.dtype)
    rng = _rng(seed, row, case, rank)
    shape = _element_shape(row.collective, case, n)
    strided = case.shape == "3x5 strided"
    if row.collective in ("broadcast", "scatter") and rank != case.root:
        return None if case.repeat % 2 == 0 else _array(rng, shape, dtype, "move", "random", strided)
    role = row.op if row.collective in REDUCTIONS else "move"
    return _array(rng, shape, dtype, role, case.kind, strided)


def messages(row: Row, case: Case, rank: int, n: int, seed: int) -> list[tuple[int, np.ndarray]]:
    """``(tag, array)`` that ``rank`` sends to ``rank + 1`` in a send_recv
    case: two with tag 0 (they must arrive in order), and for small shapes a
    third with tag 7, which the receiver takes first."""
    dtype = dtype_named(row.dtype)
    rng = _rng(seed, row, case, rank)
    shape = _element_shape(row.collective, case, n)
    strided = case.shape == "3x5 strided"
    tags = (0, 0) if case.shape == "large" else (0, 0, 7)
    return [(tag, _array(rng, shape, dtype, "move", case.kind, strided)) for tag in tags]

