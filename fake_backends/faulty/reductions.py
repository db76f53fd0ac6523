"""Reduction bugs: allreduce, reduce and reduce_scatter compute the wrong thing.

Each fake here overrides the three reductions through one method,
``_reduction(name, x, op, root)``, and leaves every other call to the base.
Most take the base's result and spoil it, so the result is the base's
algorithm and order with one mistake on top; :class:`MissingLastRank`
gathers and folds itself (see :mod:`fake_backends.faulty._gathered`).
"""

from __future__ import annotations

import numpy as np

import simdist
from simdist._reduction import divide_mean, quiet_fp

from . import _gathered
from ._base import ReductionWrapper

__all__ = ["SumForMean", "WrongMeanDivisor", "MissingLastRank", "NarrowedFloat64", "UnreducedTail", "OneUlpApart"]


def _dtype(x) -> np.dtype:
    """The dtype ``x`` would have as an input (object for what is not an array)."""
    return x.dtype if isinstance(x, np.ndarray) else np.asarray(x).dtype


class SumForMean(ReductionWrapper):
    """``op="mean"`` returns the sum: the division by the number of ranks is
    forgotten (as in nGraph's MNIST example, and in every hand-rolled
    gradient average that calls ``allreduce`` and forgets to scale).

    Shows as a mean ``size`` times too large, on every rank alike; invisible
    on one rank. Integer means still raise, as the base's do.
    """

    name = "sum_for_mean"

    def _reduction(self, name, x, op, root):
        if op == "mean" and _dtype(x).kind in "fc":
            op = "sum"
        return self._base_reduction(name, x, op, root)


class WrongMeanDivisor(ReductionWrapper):
    """``op="mean"`` divides the sum by the wrong count: ``size - 1``
    (``off_by=-1``, the default: "the others") or ``size + 1``
    (``off_by=1``: a coordinator counted as a worker).

    Shows as a mean scaled by ``size / (size - 1)`` (or ``size / (size + 1)``),
    on every rank alike; on one rank with ``off_by=-1`` a division by zero
    (inf and nan, silently).
    """

    name = "wrong_mean_divisor"

    def __init__(self, base, *, seed=0, off_by: int = -1):
        super().__init__(base, seed=seed)
        if off_by not in (-1, 1) or isinstance(off_by, bool):
            raise simdist.InvalidValue(f"WrongMeanDivisor(off_by={off_by!r}): off_by must be -1 or 1")
        self.off_by = off_by

    def options(self) -> dict:
        return {"off_by": self.off_by}

    def _reduction(self, name, x, op, root):
        if op != "mean" or _dtype(x).kind not in "fc":
            return self._base_reduction(name, x, op, root)
        out = self._base_reduction(name, x, "sum", root)
        return None if out is None else divide_mean(out, self.size + self.off_by)


class MissingLastRank(ReductionWrapper):
    """Reductions skip the last rank's input: an off-by-one loop
    ``for r in range(size - 1)`` over the ranks' buffers. ``mean`` still
    divides by ``size``.

    Shows as results that lack one contribution (a sum short by the last
    rank's array; a max that ignores it), on every rank alike, so the ranks
    agree and no consistency check notices. No effect on one rank. The
    remaining ranks are folded in ascending order (the simulator's order).
    """

    name = "missing_last_rank"

    def _reduction(self, name, x, op, root):
        if self.size == 1:
            return self._base_reduction(name, x, op, root)
        x, root = _gathered.validate(self.base, name, x, op, root)
        return _gathered.reduction(self.base, name, x, op, root, range(self.size - 1))


class NarrowedFloat64(ReductionWrapper):
    """float64 inputs are reduced in float32 and the result cast back to
    float64: a library (or a mixed-precision setting) that silently carries
    doubles as singles. The dtype is right, so only the values tell.

    Shows as results with float32's precision (errors near 1e-8 relative, far
    beyond float64's bound) and as inf where a value exceeds float32's
    range; small integers survive exactly. Other dtypes are untouched.
    """

    name = "narrowed_float64"

    def _reduction(self, name, x, op, root):
        if _dtype(x) != np.float64:
            return self._base_reduction(name, x, op, root)
        with quiet_fp():
            narrow = np.asarray(x).astype(np.float32)
        out = self._base_reduction(name, narrow, op, root)
        return None if out is None else out.astype(np.float64)


class UnreducedTail(ReductionWrapper):
    """The last element of a reduction's result is the rank's own input
    value, not the reduction: a vectorised kernel whose remainder loop never
    runs, leaving the tail of the buffer as it was.

    Shows as one wrong element per result (the last, in C order), different
    on each rank (each keeps its own value); for ``reduce_scatter`` the last
    element of the rank's block is its own ``x[rank]``'s. Empty results are
    untouched; on one rank only ``mean`` and logical ops show it.
    """

    name = "unreduced_tail"

    def _reduction(self, name, x, op, root):
        out = self._base_reduction(name, x, op, root)
        if out is None or out.size == 0:
            return out
        own = np.asarray(x)
        if name == "reduce_scatter":
            own = own[self.rank]
        out.flat[-1] = own.flat[-1]
        return out


class OneUlpApart(ReductionWrapper):
    """Floating-point reduction results on odd ranks are one ulp higher
    (``np.nextafter`` towards +inf; the real part of complex results): ranks
    that took different code paths (or a different order) for the same
    reduction, so replicas drift apart.

    Shows as ranks that disagree in the last bit, and as results one ulp off
    the exact value where the inputs sum exactly; well within the error bound
    of random data. Integer and bool results, and even ranks, are untouched;
    no effect on one rank.
    """

    name = "one_ulp_apart"

    def _reduction(self, name, x, op, root):
        out = self._base_reduction(name, x, op, root)
        if out is None or self.rank % 2 == 0 or out.dtype.kind not in "fc":
            return out
        part = out.real if out.dtype.kind == "c" else out
        np.nextafter(part, np.inf, out=part)
        return out
