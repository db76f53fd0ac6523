"""The base of every fake: a communicator that passes every call to another.

A fake is a :class:`Wrapper` around ``base`` (the world's communicator, on
the simulator or MPI) that overrides only the calls its bug touches, so that
everything else is the base's, to the bit. Calls a fake cannot make sense
of (a malformed argument) go to the base untouched, so that the errors a
fake raises are the base's errors.

Randomness comes only from ``self.rng``, a generator seeded from the fake's
``seed``: per rank (``default_rng([seed, rank])``) by default, or the same
on every rank where the bug needs the ranks to agree (``SHARED_RNG``). A
fake that draws from a shared generator must draw on every rank of every
call it touches, or the ranks' generators drift apart.
"""

from __future__ import annotations

import operator

import numpy as np

import simdist
from simdist._communicator import REDUCTIONS

__all__ = ["Wrapper", "ReductionWrapper"]


def _entropy(seed) -> tuple[int, ...]:
    """``seed`` (an int >= 0, or a tuple of them for sub-communicators) as a tuple."""
    parts = seed if isinstance(seed, tuple) else (seed,)
    for p in parts:
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, np.integer)):
            raise simdist.InvalidType(f"seed={seed!r} must be an int >= 0, e.g. seed=0")
        if p < 0:
            raise simdist.InvalidValue(f"seed={seed!r} must be an int >= 0, e.g. seed=0")
    return tuple(operator.index(p) for p in parts)


def positive_int(value, name: str, cls: type) -> int:
    """A constructor option that counts something from 1 (``call=``, ``every=``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise simdist.InvalidValue(f"{cls.__name__}({name}={value!r}): {name} must be an int >= 1")
    return operator.index(value)


class Wrapper(simdist.Communicator):
    """Passes every call to ``base``; a fake overrides what its bug touches.

    ``seed`` (an int >= 0) seeds ``self.rng``. ``split`` wraps each
    sub-communicator in a new fake of the same class and options, whose
    generator is derived from this one's seed and the number of the split, so
    a fake's sub-communicators misbehave the same way, reproducibly.
    ``touches`` names the calls the bug can change; every other call returns
    the base's result bit for bit.
    """

    #: The registry name (``fake_backends.FAKES``); set by each fake.
    name = "wrapper"
    #: The calls the bug can change.
    touches: frozenset = frozenset()
    #: True where every rank must draw the same numbers (one seed for all ranks).
    SHARED_RNG = False

    def __init__(self, base, *, seed=0):
        entropy = _entropy(seed)
        self.base = base
        self.seed = entropy[0] if len(entropy) == 1 else entropy
        self.rng = np.random.default_rng(list(entropy) if self.SHARED_RNG else [*entropy, base.rank])
        self._entropy = entropy
        self._splits = 0

    def options(self) -> dict:
        """The constructor's keyword options besides ``seed`` (for sub-communicators)."""
        return {}

    def _before(self, name: str) -> None:
        """Called before each blocking call this class passes through
        (collectives, barrier, recv, split, free): a hook for fakes whose bug
        is about when a call happens rather than what it returns."""

    def _child(self, sub):
        return type(self)(sub, seed=(*self._entropy, self._splits), **self.options())

    def __getattr__(self, name):  # a backend's extras (not the contract's): the base's
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank} of {self.size} over {self.base!r}>"

    # -- the contract, passed through ---------------------------------------
    @property
    def rank(self) -> int:
        return self.base.rank

    @property
    def size(self) -> int:
        return self.base.size

    def allreduce(self, x, op="sum"):
        self._before("allreduce")
        return self.base.allreduce(x, op=op)

    def reduce(self, x, root=0, op="sum"):
        self._before("reduce")
        return self.base.reduce(x, root=root, op=op)

    def reduce_scatter(self, x, op="sum"):
        self._before("reduce_scatter")
        return self.base.reduce_scatter(x, op=op)

    def broadcast(self, x, root=0):
        self._before("broadcast")
        return self.base.broadcast(x, root=root)

    def allgather(self, x):
        self._before("allgather")
        return self.base.allgather(x)

    def gather(self, x, root=0):
        self._before("gather")
        return self.base.gather(x, root=root)

    def scatter(self, x, root=0):
        self._before("scatter")
        return self.base.scatter(x, root=root)

    def alltoall(self, x):
        self._before("alltoall")
        return self.base.alltoall(x)

    def barrier(self):
        self._before("barrier")
        return self.base.barrier()

    def send(self, x, dest, tag=0):
        return self.base.send(x, dest, tag=tag)

    def recv(self, source, tag=0):
        self._before("recv")
        return self.base.recv(source, tag=tag)

    def split(self, color, key=0):
        self._before("split")
        sub = self.base.split(color, key)
        self._splits += 1  # every rank calls split, so every rank counts alike
        return None if sub is None else self._child(sub)

    def free(self):
        self._before("free")
        return self.base.free()


class ReductionWrapper(Wrapper):
    """A wrapper whose three reductions go to one method,
    ``_reduction(name, x, op, root)``; ``_base_reduction`` is the base's own."""

    touches = frozenset(REDUCTIONS)

    def allreduce(self, x, op="sum"):
        return self._reduction("allreduce", x, op, 0)

    def reduce(self, x, root=0, op="sum"):
        return self._reduction("reduce", x, op, root)

    def reduce_scatter(self, x, op="sum"):
        return self._reduction("reduce_scatter", x, op, 0)

    def _reduction(self, name, x, op, root):  # pragma: no cover - every fake overrides it
        raise NotImplementedError

    def _base_reduction(self, name, x, op, root):
        if name == "reduce":
            return self.base.reduce(x, root=root, op=op)
        return getattr(self.base, name)(x, op=op)
