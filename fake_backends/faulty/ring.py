"""A ring allreduce written on ``send``/``recv``, correct and with the bugs
such rings commonly have.

:class:`RingAllreduce` is the algorithm most collective libraries use for
large arrays: the flattened input is cut into ``size`` chunks; in a
reduce-scatter of ``size - 1`` steps each rank passes one chunk to the next
rank and folds the chunk it receives into its own, after which rank ``r``
holds the fully reduced chunk ``r + 1``; an allgather of ``size - 1`` steps
then passes the reduced chunks round. Ranks of even number send before they
receive and odd ones receive first, so no step needs the transport to
buffer a message. Only ``allreduce`` is the ring's; every other call is the
base's.

The faulty variants each change one line of it:

* :class:`RingAliasesInput`: works on the caller's array instead of a copy;
* :class:`RingSendsFirst`: every rank sends before it receives, which
  completes only while the transport buffers the message (MPI's eager
  protocol), and deadlocks when it does not;
* :class:`RingSkipsAStep`: the reduce-scatter stops one step early.
"""

from __future__ import annotations

import numpy as np

from simdist._reduction import divide_mean, fold

from . import _gathered
from ._base import Wrapper

__all__ = ["RingAllreduce", "RingAliasesInput", "RingSendsFirst", "RingSkipsAStep"]


class RingAllreduce(Wrapper):
    """A correct ring allreduce (reduce-scatter then allgather) on the
    base's ``send`` and ``recv``; everything else is the base's.

    It reduces each chunk in another order than the simulator (starting at
    the rank after the chunk's number), so floating-point sums may differ
    from the simulator's within the contract's bound; every rank gets the
    same bits, because each chunk is reduced once and then copied. ``mean``
    is the ring's sum divided by the number of ranks.
    """

    name = "ring_allreduce"
    touches = frozenset(("allreduce",))

    def allreduce(self, x, op="sum"):
        x, _ = _gathered.validate(self.base, "allreduce", x, op)
        flat = self._working_copy(x)
        fold_op = "sum" if op == "mean" else op
        if self.size == 1:               # no step folds: the op still applies (land of -1 is 1)
            fold(fold_op, [flat], flat)
        bounds = np.linspace(0, flat.size, self.size + 1).astype(np.int64)
        chunks = [flat[bounds[i]:bounds[i + 1]] for i in range(self.size)]
        rank, size = self.rank, self.size
        for step in range(self._reduce_scatter_steps()):
            incoming = self._exchange(chunks[(rank - step) % size])
            mine = chunks[(rank - step - 1) % size]
            fold(fold_op, [incoming, mine], mine)
        for step in range(size - 1):
            incoming = self._exchange(chunks[(rank + 1 - step) % size])
            chunks[(rank - step) % size][...] = incoming
        if op == "mean":
            divide_mean(flat, size)
        return flat.reshape(x.shape)

    # -- the lines the faulty variants change ---------------------------------
    def _working_copy(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, copy=True).reshape(-1)

    def _reduce_scatter_steps(self) -> int:
        return self.size - 1

    def _sends_first(self) -> bool:
        return self.rank % 2 == 0

    def _exchange(self, outgoing: np.ndarray) -> np.ndarray:
        """Send ``outgoing`` to the next rank and receive from the previous one."""
        after, before = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        if self._sends_first():
            self.base.send(outgoing, after)
            return self.base.recv(before)
        incoming = self.base.recv(before)
        self.base.send(outgoing, after)
        return incoming


class RingAliasesInput(RingAllreduce):
    """The ring works on ``x.reshape(-1)``, a view of the caller's array
    where ``x`` is contiguous, instead of a copy.

    Shows as the input overwritten by the result on every rank (the
    contract: inputs are never modified), and as numpy's "assignment
    destination is read-only" on a read-only input. The result itself is
    right, so a test that looks only at results passes.
    """

    name = "ring_aliases_input"

    def _working_copy(self, x):
        return x.reshape(-1)


class RingSendsFirst(RingAllreduce):
    """Every rank sends its chunk before it receives one.

    Shows as nothing while the transport buffers each message (the
    simulator below its ring capacity, MPI below its eager limit); once a
    send completes only when it is received (``MPI_Ssend``, or a standard
    send above the eager limit: 25,001 int32 per chunk under Open MPI), every
    rank waits in ``send`` for a rank that also waits in ``send``: a
    deadlock, a cycle through all the ranks.
    """

    name = "ring_sends_first"

    def _sends_first(self):
        return True


class RingSkipsAStep(RingAllreduce):
    """The reduce-scatter makes ``size - 2`` steps instead of ``size - 1``.

    Shows as chunks of the result that miss some ranks' contributions, the
    same on every rank; right only on one rank.
    """

    name = "ring_skips_a_step"

    def _reduce_scatter_steps(self):
        return self.size - 2
