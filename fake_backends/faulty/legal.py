"""Legal fakes: communicators that behave differently from the simulator but
within the contract, as real MPI libraries do. A property suite must accept
them; a test that fails on them assumes more than the contract promises.
"""

from __future__ import annotations

import time

import simdist

from . import _gathered
from ._base import ReductionWrapper, Wrapper

__all__ = ["RandomOrder", "RandomDelays"]


class RandomOrder(ReductionWrapper):
    """Reductions fold the ranks' arrays in a random order, drawn for each
    call from a generator seeded alike on every rank: the same bits on every
    rank within a run, different bits for a different seed or a different
    call. Otherwise correct: every op and dtype, in the input dtype, with the
    base's argument errors (it gathers the inputs with the base's
    ``allgather`` and folds them with simdist's fold; see
    :mod:`fake_backends.faulty._gathered`).

    This is what MPI allows (the standard fixes no order; Open MPI and MPICH
    pick algorithms by size and count). Floating-point sums and products may
    differ from the simulator's, within the contract's error bound; exactly
    summable data, integers, min/max and bitwise ops give the same bits.
    ``last_order`` is the order of the last reduction (rank indices, folded
    left to right). Note that ``reduce_scatter`` then equals a block of an
    ``allreduce`` of the same data only within the bound, not to the bit,
    and ``reduce`` the ``allreduce`` likewise: they are different calls.
    """

    name = "random_order"
    SHARED_RNG = True

    def __init__(self, base, *, seed=0):
        super().__init__(base, seed=seed)
        self.last_order: tuple[int, ...] = tuple(range(base.size))

    def _reduction(self, name, x, op, root):
        x, root = _gathered.validate(self.base, name, x, op, root)
        order = self.rng.permutation(self.size)  # every rank draws, so the generators stay alike
        self.last_order = tuple(int(r) for r in order)
        return _gathered.reduction(self.base, name, x, op, root, self.last_order)


class RandomDelays(Wrapper):
    """Each rank sleeps a random 0 to ``max_delay`` seconds (default 2 ms;
    per rank, from its own seeded generator) before every call that may
    block and every send: ranks that arrive in a different order each time,
    as on a loaded machine or a network with jitter. Every result is the
    base's, to the bit.

    A test that fails on it depends on timing (a barrier assumed to be a
    clock, a race between ranks), not on the contract.
    """

    name = "random_delays"

    def __init__(self, base, *, seed=0, max_delay: float = 0.002):
        super().__init__(base, seed=seed)
        if isinstance(max_delay, bool) or not isinstance(max_delay, (int, float)) or not 0 <= max_delay <= 10:
            raise simdist.InvalidValue(f"RandomDelays(max_delay={max_delay!r}): max_delay must be a number "
                                       "of seconds from 0 to 10")
        self.max_delay = float(max_delay)

    def options(self) -> dict:
        return {"max_delay": self.max_delay}

    def _before(self, name: str) -> None:
        time.sleep(self.rng.uniform(0.0, self.max_delay))

    def send(self, x, dest, tag=0):
        self._before("send")
        return self.base.send(x, dest, tag=tag)
