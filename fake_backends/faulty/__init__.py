"""Communicators that misbehave on purpose, for testing error handling and
property suites. Each wraps a real communicator and has one fault (the
legal ones: a freedom the contract allows, such as another reduction order).

Every fake is a small :class:`Wrapper` around ``base`` (the world's
communicator, on the simulator or MPI) that overrides only the calls its bug
touches; everything else is the base's, to the bit. Randomness comes only
from a generator seeded by the fake's ``seed`` (default 0). See
docs/fakes.md.

* :data:`FAKES` maps every name to its class; :data:`LEGAL` holds the fakes
  that stay within the contract (a property suite must accept them), and
  :data:`FAULTY` the others (it must reject each).
* ``make(name, base, seed=0, **options)`` builds one.
* Every name is also a factory of this package, re-exported by
  :mod:`fake_backends` as ``fake_backends:NAME``, that takes just ``base``
  (seed 0, default options): the ``MODULE:FACTORY`` form of
  ``simdist check --backend`` and of property suites, e.g.
  ``simdist check -n 4 --quick --backend fake_backends:sum_for_mean``.
"""

from __future__ import annotations

from typing import Callable

import simdist
from simdist._communicator import COLLECTIVES

from ._base import ReductionWrapper, Wrapper
from .data import (AllgatherArrivalOrder, ModifiesInput, ReusedResultBuffer, StaleResult, WrongReduceScatterBlock,
                   WrongRoot)
from .legal import RandomDelays, RandomOrder
from .p2p import ReorderedMessages
from .process import DyingRank, HangingRank, NoWaitBarrier
from .ring import RingAliasesInput, RingAllreduce, RingSendsFirst, RingSkipsAStep
from .reductions import (MissingLastRank, NarrowedFloat64, OneUlpApart, SumForMean, UnreducedTail,
                         WrongMeanDivisor)

_CLASSES = (
    # reduction bugs
    SumForMean, WrongMeanDivisor, MissingLastRank, NarrowedFloat64, UnreducedTail, OneUlpApart,
    # collective data bugs
    WrongRoot, StaleResult, AllgatherArrivalOrder, WrongReduceScatterBlock, ModifiesInput, ReusedResultBuffer,
    # point-to-point bugs
    ReorderedMessages,
    # process bugs
    HangingRank, DyingRank, NoWaitBarrier,
    # a ring allreduce's bugs
    RingAliasesInput, RingSendsFirst, RingSkipsAStep,
    # legal
    RandomOrder, RandomDelays, RingAllreduce,
)

#: Every fake, by name.
FAKES: dict[str, type[Wrapper]] = {cls.name: cls for cls in _CLASSES}
#: The fakes that stay within the contract: a property suite must accept them.
LEGAL: dict[str, type[Wrapper]] = {cls.name: cls for cls in (RandomOrder, RandomDelays, RingAllreduce)}
#: The fakes with a bug: a property suite must reject each.
FAULTY: dict[str, type[Wrapper]] = {name: cls for name, cls in FAKES.items() if name not in LEGAL}


def make(name: str, base, seed: int = 0, **options) -> Wrapper:
    """The fake ``name`` (a key of :data:`FAKES`) around ``base``, its
    generator seeded by ``seed``; ``options`` are the fake's own (``call=``
    of ``hanging_rank``, ``every=`` of ``stale_result``, ...)."""
    try:
        cls = FAKES[name]
    except (KeyError, TypeError):
        raise simdist.InvalidValue(f"make(name={name!r}): no such fake; choose from {', '.join(FAKES)}") from None
    return cls(base, seed=seed, **options)


def _factory(name: str) -> Callable:
    def factory(base):
        return make(name, base)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"``make({name!r}, base)``: the ``fake_backends:{name}`` factory (seed 0)."
    return factory


# fake_backends:NAME for every fake (written out, so that they can be found)
sum_for_mean = _factory("sum_for_mean")
wrong_mean_divisor = _factory("wrong_mean_divisor")
missing_last_rank = _factory("missing_last_rank")
narrowed_float64 = _factory("narrowed_float64")
unreduced_tail = _factory("unreduced_tail")
one_ulp_apart = _factory("one_ulp_apart")
wrong_root = _factory("wrong_root")
stale_result = _factory("stale_result")
allgather_arrival_order = _factory("allgather_arrival_order")
wrong_reduce_scatter_block = _factory("wrong_reduce_scatter_block")
modifies_input = _factory("modifies_input")
reused_result_buffer = _factory("reused_result_buffer")
reordered_messages = _factory("reordered_messages")
hanging_rank = _factory("hanging_rank")
dying_rank = _factory("dying_rank")
no_wait_barrier = _factory("no_wait_barrier")
ring_aliases_input = _factory("ring_aliases_input")
ring_sends_first = _factory("ring_sends_first")
ring_skips_a_step = _factory("ring_skips_a_step")
random_order = _factory("random_order")
random_delays = _factory("random_delays")
ring_allreduce = _factory("ring_allreduce")

__all__ = [
    "FAKES", "LEGAL", "FAULTY", "make", "Wrapper", "ReductionWrapper", "COLLECTIVES",
    *(cls.__name__ for cls in _CLASSES),
    *FAKES,
]
