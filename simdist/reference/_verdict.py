"""One collective call judged: :func:`check` and its :class:`Verdict`.

:func:`check` holds every rank's result to the contract -- the dtype, the
shape and ``None`` where the contract says so, the same bits on every rank
where it gives every rank one result -- and judges the contents: data
movement by its bytes, reductions element by element (:mod:`._bounds`).
:func:`reduction` gives the bits of a named reduction order.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Sequence

import numpy as np

from .._arguments import DTYPES
from .._bfloat16 import is_bfloat16
from .._communicator import COLLECTIVES as _CONTRACT_COLLECTIVES
from .._communicator import BLOCKED, REDUCTIONS
from .._errors import InvalidType, InvalidValue
from .._orders import ORDERS as NAMED_ORDERS
from .._orders import in_order
from .._reduction import OPS, accepts
from ._bounds import Judgement, bitwise, bitwise_bytes, judge

__all__ = ["Verdict", "check", "reduction", "COLLECTIVES", "ORDERS"]

#: The collectives :func:`check` knows, reductions first (every collective
#: of the contract that returns data: not barrier).
COLLECTIVES = (*REDUCTIONS, *(c for c in _CONTRACT_COLLECTIVES if c not in REDUCTIONS and c != "barrier"))
#: Names ``order`` may take: the named orders (checked bit for bit) and "tree".
ORDERS = (*NAMED_ORDERS, "tree")


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


def reduction(parts: Sequence[np.ndarray], op: str = "sum", order: str = "fold") -> np.ndarray:
    """``parts`` (one array per rank) reduced with ``op`` in a named ``order``
    (``"fold"``, ``"ring"``, ``"recursive_doubling"``), in the input dtype."""
    if order not in NAMED_ORDERS:
        raise InvalidValue(f"reduction: order={order!r} is not a named order; use one of {', '.join(NAMED_ORDERS)}")
    return in_order(order, op, [np.asarray(p) for p in parts])


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


def _describe(judged: Judgement, got: np.ndarray, shape: tuple, parts: Sequence[np.ndarray] | None) -> str:
    """What is wrong in one rank's result (no rank named: ranks with the same
    text are reported together). ``parts`` are the ranks' inputs to a
    reduction, in rank order, shown at the worst element; an allreduce's or
    reduce's worst element is placed in its chunk of an even split, where
    chunked algorithms (ring, reduce-scatter + gather) go wrong."""
    bad = np.flatnonzero(~judged.ok)
    if bad.size == 0:
        return ""
    ratio = judged.ratio
    j = int(bad[np.argmax(ratio[bad])])
    where = f"element {tuple(map(int, np.unravel_index(j, shape))) if len(shape) > 1 else j}"
    if parts is not None and len(parts) > 1 and judged.ok.size > 1:
        where += _chunk(j, judged.ok.size, len(parts))
    head = f"{bad.size} of {judged.ok.size} element(s) wrong; worst {where}: got {_show(got.reshape(-1)[j])}"
    expected = _show(judged.expected[j])
    if judged.exact[j] or not math.isfinite(judged.error[j]) or judged.bound[j] == 0:
        text = f"{head}, expected {expected}" + (" (bit for bit)" if judged.exact[j] else "")
    else:
        text = (f"{head}, exact value {expected}: |error| {judged.error[j]:.3g} > bound "
                f"{judged.bound[j]:.3g} (ratio {float(judged.error[j]) / float(judged.bound[j]):.3g})")
    if parts is not None:
        shown = ", ".join(f"rank {r} {_show(p.reshape(-1)[j])}" for r, p in enumerate(parts[:_SHOWN_INPUTS]))
        text += f"; the inputs there: {shown}" + (", ..." if len(parts) > _SHOWN_INPUTS else "")
    return text


_SHOWN_INPUTS = 8  # ranks whose input at the worst element a reason shows


def _chunk(j: int, total: int, n: int) -> str:
    """Where element ``j`` of ``total`` falls in an even ``n``-way split
    (the first ``total % n`` chunks one longer, as ``numpy.array_split``
    and MPI libraries' ring algorithms cut)."""
    small, extra = divmod(total, n)
    long_end = extra * (small + 1)
    c = j // (small + 1) if j < long_end else extra + (j - long_end) // small
    lo = c * small + min(c, extra)
    hi = lo + small + (c < extra)
    return f" (chunk {c} of {n}: elements {lo}-{hi - 1})"


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _as_array(x, rank: int, collective: str) -> np.ndarray:
    if x is None:
        raise InvalidType(f"check: {collective}: inputs[{rank}]=None; rank {rank} must pass an array")
    x = np.asarray(x)
    if x.dtype not in DTYPES and not is_bfloat16(x.dtype):
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
        if collective not in REDUCTIONS:
            raise InvalidValue(f"check: {collective}: order={order!r} only applies to reductions; pass order=None")
        if order not in ORDERS:
            raise InvalidValue(f"check: order={order!r} is not a known order; use None or one of {', '.join(ORDERS)}")
    if collective in REDUCTIONS and op not in OPS:
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
    if collective in BLOCKED and (len(shape) == 0 or shape[0] != n):
        raise InvalidValue(f"check: {collective}: inputs have shape {shape}; they must have shape ({n}, ...)")
    if collective in REDUCTIONS and not accepts(op, dtype):
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
    seen: dict[tuple, Judgement] = {}  # identical outputs are judged once
    full = None
    if collective == "reduce_scatter" and order in NAMED_ORDERS:  # block r of the ordered allreduce
        full = in_order(order, op, [xs[j] for j in range(n)])
    described: dict[str, list[int]] = {}  # what is wrong -> the ranks it is wrong on
    for r in well_formed:
        got = np.ascontiguousarray(outputs[r])
        flat = got.reshape(-1)
        if full is not None:
            judged = bitwise(flat, full[r].reshape(-1))
        elif collective in REDUCTIONS:
            key = (r if collective == "reduce_scatter" else -1, got.tobytes())
            if key not in seen:
                parts = [xs[j][r] if collective == "reduce_scatter" else xs[j] for j in range(n)]
                seen[key] = judge(op, parts, got, order)
            judged = seen[key]
        else:
            judged = bitwise_bytes(flat, np.ascontiguousarray(_moved(collective, xs, r, n, root)).reshape(-1))
        exact = bool(judged.exact.all())
        exact_all &= exact
        if exact and judged.ok.all():
            continue  # every element the very bits: nothing worse than (0, 0, 0), nothing to describe
        if judged.ok.size:
            ratio = judged.ratio
            top = np.flatnonzero(ratio == ratio.max())
            j = int(top[np.argmax(judged.error[top])])  # the largest ratio, then the largest error
            worst = max(worst, (float(ratio[j]), float(judged.error[j]), float(judged.bound[j])))
        parts = None
        if collective in REDUCTIONS:
            parts = [xs[j][r] if collective == "reduce_scatter" else xs[j] for j in range(n)]
        if (text := _describe(judged, got, want[r], parts)):
            described.setdefault(text, []).append(r)
    problems += [f"{_ranks_text(ranks)}: {text}" for text, ranks in described.items()]
    ratio, max_error, bound = worst
    return Verdict(
        collective=collective,
        dtype=str(dtype),
        op=op if collective in REDUCTIONS else None,
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

