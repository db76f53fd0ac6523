"""Hypothesis strategies for collectives: dtypes, shapes, data, ops, roots, splits, programs.

Data for ``size`` ranks is drawn in the driver, as one array per rank, and
travels to the ranks with the function of a run. Two kinds of values:

* ``exact`` values sum, in the dtype, to the same bits in every order (small
  integers times a power of two, few enough that no partial sum rounds), so
  relations between collectives can be checked bit for bit even against a
  backend that reduces in any order;
* ``inexact`` values (any finite floats of moderate magnitude) round
  differently in different orders, so they are judged by
  :func:`simdist.reference.check` against the summation bound.

``dtypes``, ``ops`` and the collectives of ``steps``/``programs`` draw only
from the session's focus (``--simdist-dtypes``, ``--simdist-ops``,
``--simdist-collectives``); a test whose draw the focus leaves empty is
skipped, saying why.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simdist._arguments import DTYPES
from simdist._communicator import BLOCKED, COLLECTIVES, REDUCTIONS
from simdist._reduction import ops_for

from ._cases import focus

__all__ = [
    "DTYPES", "world_sizes", "dtypes", "collectives", "shapes", "ops", "ops_and_dtypes", "roots", "rank_arrays", "exact_rank_arrays",
    "colors_and_keys", "messages", "programs", "Step",
]


def world_sizes(max_size: int) -> st.SearchStrategy[int]:
    """Sizes of sub-worlds, 1 to ``max_size``."""
    return st.integers(1, max_size)


def _among(choices: list, why: str) -> st.SearchStrategy:
    if not choices:
        import pytest

        pytest.skip(f"outside the focus: {why}")
    return st.sampled_from(choices)


def dtypes(kinds: str = "biufc", op: str | None = None) -> st.SearchStrategy[np.dtype]:
    """Dtypes of the contract whose kind is in ``kinds`` (``b i u f c``)
    and, given ``op``, that take ``op``."""
    return _among([d for d in focus().dtypes if d.kind in kinds and (op is None or op in ops_for(d))],
                  f"no dtype of kind {kinds!r}{f' that takes {op}' if op else ''} among "
                  f"{', '.join(map(str, focus().dtypes))}")


def shapes(min_dims: int = 0, max_dims: int = 3, large: bool = True) -> st.SearchStrategy[tuple]:
    """Shapes: 0-d, empty, odd sides; sometimes one large enough to be chunked."""
    small = hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=5)
    if not large:
        return small
    return st.one_of(small, small, small, st.sampled_from([(4099,), (70001,), (3, 257)]))


def ops(dtype: np.dtype) -> st.SearchStrategy[str]:
    """The reduction ops defined on ``dtype``."""
    return _among([op for op in ops_for(np.dtype(dtype)) if op in focus().ops],
                  f"no op of {np.dtype(dtype)} among {', '.join(focus().ops)}")


@st.composite
def ops_and_dtypes(draw, kinds: str = "biufc"):
    """``(op, dtype)``: an op of the focus, then a dtype of ``kinds`` that takes it."""
    op = draw(_among([op for op in focus().ops if any(op in ops_for(d) for d in DTYPES if d.kind in kinds)],
                     f"no op of a dtype of kind {kinds!r} among {', '.join(focus().ops)}"))
    return op, draw(dtypes(kinds, op))


def roots(size: int) -> st.SearchStrategy[int]:
    return st.integers(0, size - 1)


def _elements(dtype: np.dtype, exact: bool, size: int, op: str | None):
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    if not exact:
        width = dtype.itemsize * 8 // (2 if dtype.kind == "c" else 1)
        limit = 2.0 if op == "prod" else 1e3        # no overflow, even in float16
        part = st.floats(-limit, limit, allow_nan=False, width=width)
        return st.builds(complex, part, part) if dtype.kind == "c" else part
    precision = np.finfo(dtype).nmant + 1
    if op == "prod":                         # powers of two multiply exactly
        part = st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0] + ([] if dtype.kind == "c" else [0.0]))
    else:                                    # integers whose every partial sum fits
        bound = max(1, 2 ** (precision - 1) // max(size, 1) - 1)
        part = st.integers(-min(bound, 1000), min(bound, 1000)).map(float)
    return st.builds(complex, part, part) if dtype.kind == "c" else part


def rank_arrays(size: int, dtype: np.dtype, shape: tuple, exact: bool = False, op: str | None = None):
    """One array per rank, all of ``dtype`` and ``shape``."""
    dtype = np.dtype(dtype)
    one = hnp.arrays(dtype, shape, elements=_elements(dtype, exact, size, op))
    if int(np.prod(shape)) > 4096:           # large arrays: draw a seed, not every element
        return st.integers(0, 2**32 - 1).map(lambda s: _large(size, dtype, shape, exact, s, op))
    return st.lists(one, min_size=size, max_size=size)


def exact_rank_arrays(size: int, dtype: np.dtype, shape: tuple, op: str = "sum"):
    """Per-rank arrays that ``op`` reduces to the same bits in every order."""
    return rank_arrays(size, dtype, shape, exact=True, op=op)


def _large(size: int, dtype: np.dtype, shape: tuple, exact: bool, seed: int, op: str | None = None) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(size):
        if dtype.kind == "b":
            a = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        elif exact and op == "prod":         # powers of two multiply exactly
            a = (rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], shape)).astype(dtype)
        elif exact:
            a = rng.integers(-100, 100, shape).astype(dtype)
        else:
            a = (rng.standard_normal(shape) * 100).astype(dtype)
            if dtype.kind == "c":
                a = a + 1j * (rng.standard_normal(shape) * 100).astype(dtype)
        out.append(np.asarray(a, dtype=dtype))
    return out


def colors_and_keys(size: int):
    """``(color or None, key)`` per rank, for ``split``."""
    color = st.one_of(st.none(), st.integers(0, 3))
    return st.lists(st.tuples(color, st.integers(-3, 3)), min_size=size, max_size=size)


def messages(size: int, max_messages: int = 8):
    """``(source, dest, tag, length)`` messages between distinct ranks."""
    if size < 2:
        return st.just([])
    pair = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).filter(lambda p: p[0] != p[1])
    one = st.tuples(pair, st.integers(0, 2), st.integers(0, 6)).map(lambda m: (m[0][0], m[0][1], m[1], m[2]))
    return st.lists(one, max_size=max_messages)


class Step(tuple):
    """One call of a program: ``(collective, dtype, shape, op, root, data)``."""

    collective = property(lambda self: self[0])
    dtype = property(lambda self: self[1])
    shape = property(lambda self: self[2])
    op = property(lambda self: self[3])
    root = property(lambda self: self[4])
    data = property(lambda self: self[5])


def collectives(among=COLLECTIVES) -> st.SearchStrategy[str]:
    """The collectives of ``among`` in the focus."""
    return _among([c for c in among if c in focus().collectives], f"none of {', '.join(among)} selected")


@st.composite
def steps(draw, size: int, exact: bool = True):
    """One collective call with its per-rank data."""
    collective = draw(collectives())
    op, dtype = draw(ops_and_dtypes() if collective in REDUCTIONS else st.tuples(st.none(), dtypes()))
    shape = draw(shapes(large=False))
    if collective in BLOCKED:
        shape = (size, *shape)
    root = draw(roots(size))
    data = draw(rank_arrays(size, dtype, shape, exact=exact, op=op))
    return Step((collective, dtype, shape, op, root, data))


def programs(size: int, max_steps: int = 6, exact: bool = True):
    """Whole programs: sequences of collective calls with their data."""
    return st.lists(steps(size, exact), min_size=1, max_size=max_steps)
