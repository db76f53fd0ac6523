"""Process bugs: a rank that hangs, a rank that dies, a barrier that does not wait.

These fakes return nothing wrong; they break *when* things happen. The
first two strike the last rank of the communicator in its ``call``-th
collective call (default: the first), counting the collectives and
``barrier`` made on this communicator object (not sends, receives, splits or
frees; each sub-communicator from ``split`` counts its own). Use them to
test that your code, harness or CI turns a stuck or crashed rank into an
error instead of a hang: on the simulator they raise
:class:`simdist.CollectiveTimeout` and :class:`simdist.RankDied` from
``World.run``.
"""

from __future__ import annotations

import os

from simdist._communicator import COLLECTIVES

from ._base import Wrapper, positive_int

__all__ = ["HangingRank", "DyingRank", "NoWaitBarrier", "NEVER_TAG", "EXIT_STATUS"]

#: The tag of the receive a hanging rank waits in: 32767, the largest tag
#: every MPI library takes; no fake sends it.
NEVER_TAG = 32767
#: The exit status of a dying rank.
EXIT_STATUS = 17


class _AtCall(Wrapper):
    """Counts this communicator's collective calls and strikes the last
    rank at the ``call``-th, before it enters the base's collective."""

    touches = frozenset(COLLECTIVES)

    def __init__(self, base, *, seed=0, call: int = 1):
        super().__init__(base, seed=seed)
        self.call = positive_int(call, "call", type(self))
        self.calls = 0

    def options(self) -> dict:
        return {"call": self.call}

    def _before(self, name: str) -> None:
        if name not in COLLECTIVES:
            return
        self.calls += 1
        if self.calls == self.call and self.rank == self.size - 1:
            self._strike(name)

    def _strike(self, name: str) -> None:  # pragma: no cover - every fake overrides it
        raise NotImplementedError


class HangingRank(_AtCall):
    """The last rank blocks for ever in its ``call``-th collective call (a
    constructor option, default 1) while the others wait for it in that
    collective: a lost message, a deadlocked thread, a stuck device.

    Shows as a hang: ``World.run`` raises :class:`simdist.CollectiveTimeout`
    after the world's ``timeout`` (on the simulator a :class:`simdist.Deadlock`,
    at once, when no other rank computes), its report naming the last rank as
    waiting in ``recv(source=itself, tag=NEVER_TAG)`` (it blocks in a
    receive no one will match, so even a one-rank world sees a rank waiting
    in a call) and the others waiting in the collective. Calls before the
    ``call``-th, and every call on the other ranks up to it, are right.
    """

    name = "hanging_rank"

    def _strike(self, name: str) -> None:
        while True:
            self.base.recv(self.base.rank, tag=NEVER_TAG)


class DyingRank(_AtCall):
    """The last rank's process exits (``os._exit(17)``, no clean-up) in its
    ``call``-th collective call (a constructor option, default 1): a crash,
    an out-of-memory kill, a lost node.

    Shows as :class:`simdist.RankDied` from ``World.run`` ("rank N exited
    with status 17"); the world replaces the dead rank, and the next run
    starts with a fresh fake (which dies again at its ``call``-th call).
    """

    name = "dying_rank"

    def _strike(self, name: str) -> None:
        os._exit(EXIT_STATUS)


class NoWaitBarrier(Wrapper):
    """``barrier`` returns at once, without waiting for the other ranks: a
    barrier implemented as a no-op, or a non-blocking barrier never waited
    for.

    Shows only in timing: a rank leaves the barrier before a late rank has
    entered it, so whatever the barrier was to order (a file written before
    it is read, a clock read after every rank is ready) races. Every value
    is right; nothing hangs.
    """

    name = "no_wait_barrier"
    touches = frozenset(("barrier",))

    def barrier(self):
        return None
