"""Collective data bugs: the right call moves the wrong data, or moves it wrongly.

Roots, block order, rank order, staleness, aliasing: the mistakes of
collectives that move arrays (and of reductions, where the bug is in the
movement rather than the arithmetic).
"""

from __future__ import annotations

import numpy as np

from simdist._arguments import as_input, check_rank_arg
from simdist._communicator import COLLECTIVES, ROOTED

from ._base import Wrapper, positive_int

__all__ = ["WrongRoot", "StaleResult", "AllgatherArrivalOrder", "WrongReduceScatterBlock", "ModifiesInput",
           "ReusedResultBuffer"]

_DATA = tuple(c for c in COLLECTIVES if c != "barrier")  # the collectives that return arrays


def _call(base, name: str, x, kw: dict):
    return getattr(base, name)(x, **kw)


class WrongRoot(Wrapper):
    """``reduce``, ``broadcast``, ``gather`` and ``scatter`` use root
    ``(root + 1) % size``: a root numbered from 1, or a rank offset applied
    twice.

    Shows as the result on the wrong rank (``reduce``/``gather``: the root
    gets ``None`` and its successor the result) or the wrong rank's data
    (``broadcast``/``scatter``: what ``root + 1`` passed, or zeros, as from
    an untouched receive buffer, where it passed ``None``). No effect on one
    rank.
    """

    name = "wrong_root"
    touches = frozenset(ROOTED)

    def _shifted(self, root, name: str) -> tuple[int, int]:
        root = check_rank_arg(root, self.size, self.rank, name, "root")  # the base's error for a bad root
        return root, (root + 1) % self.size

    def reduce(self, x, root=0, op="sum"):
        if self.size == 1:
            return self.base.reduce(x, root=root, op=op)
        return self.base.reduce(x, root=self._shifted(root, "reduce")[1], op=op)

    def gather(self, x, root=0):
        if self.size == 1:
            return self.base.gather(x, root=root)
        return self.base.gather(x, root=self._shifted(root, "gather")[1])

    def broadcast(self, x, root=0):
        return self._from_wrong_root("broadcast", x, root)

    def scatter(self, x, root=0):
        return self._from_wrong_root("scatter", x, root)

    def _from_wrong_root(self, name: str, x, root):
        if self.size == 1:
            return getattr(self.base, name)(x, root=root)
        root, wrong = self._shifted(root, name)
        # The wrong root may hold no array (non-roots may pass None), so the
        # root first broadcasts an empty array with its dtype and shape.
        mine = as_input(x, self.rank, name) if self.rank == root else None
        like = self.base.broadcast(None if mine is None else np.empty((0, *mine.shape), mine.dtype), root=root)
        if self.rank == wrong and x is None:
            x = np.zeros(like.shape[1:], like.dtype)
        return getattr(self.base, name)(x, root=wrong)


class StaleResult(Wrapper):
    """Every ``every``-th call (default: every second) of a collective with
    the same op, root, dtype and shape returns the previous such call's
    result: a result cache keyed on the call's signature, not its data (or
    a receive buffer read before the new data landed).

    Shows as a result that belongs to the previous call's inputs, on every
    rank alike; calls with fresh signatures and odd-numbered repeats are
    right. The base is called every time, so the ranks stay in step.
    """

    name = "stale_result"
    touches = frozenset(_DATA)

    def __init__(self, base, *, seed=0, every: int = 2):
        super().__init__(base, seed=seed)
        self.every = positive_int(every, "every", type(self))
        self._calls: dict = {}
        self._last: dict = {}

    def options(self) -> dict:
        return {"every": self.every}

    def _stale(self, name: str, x, **kw):
        out = _call(self.base, name, x, kw)
        # a signature every rank computes alike: broadcast and scatter
        # non-roots may pass None, so theirs is the result's
        like = out if name in ("broadcast", "scatter") else np.asarray(x)
        key = (name, tuple(sorted(kw.items())), like.dtype.str, like.shape)
        count = self._calls[key] = self._calls.get(key, 0) + 1
        previous = self._last.get(key)
        self._last[key] = None if out is None else out.copy()
        return previous if count % self.every == 0 and count > 1 else out

    def allreduce(self, x, op="sum"):
        return self._stale("allreduce", x, op=op)

    def reduce(self, x, root=0, op="sum"):
        return self._stale("reduce", x, root=root, op=op)

    def reduce_scatter(self, x, op="sum"):
        return self._stale("reduce_scatter", x, op=op)

    def broadcast(self, x, root=0):
        return self._stale("broadcast", x, root=root)

    def allgather(self, x):
        return self._stale("allgather", x)

    def gather(self, x, root=0):
        return self._stale("gather", x, root=root)

    def scatter(self, x, root=0):
        return self._stale("scatter", x, root=root)

    def alltoall(self, x):
        return self._stale("alltoall", x)


class AllgatherArrivalOrder(Wrapper):
    """``allgather`` and ``gather`` stack the ranks in the order their data
    arrived rather than in rank order: a permutation drawn for each call from
    a generator seeded alike on every rank, so every rank gets the same,
    plausible, wrong stack. Never the identity on two or more ranks.

    Shows as rows of the stack in the wrong places (``last_order[k]`` is the
    rank whose array is row ``k``); the multiset of rows is right, so sums
    over the stack are too. No effect on one rank.
    """

    name = "allgather_arrival_order"
    touches = frozenset(("allgather", "gather"))
    SHARED_RNG = True

    def __init__(self, base, *, seed=0):
        super().__init__(base, seed=seed)
        self.last_order: tuple[int, ...] = tuple(range(base.size))

    def _order(self) -> np.ndarray:
        # drawn after the base's call: a call that raises draws nothing on any rank
        n = self.size
        order = self.rng.permutation(n)
        while n > 1 and (order == np.arange(n)).all():
            order = self.rng.permutation(n)
        self.last_order = tuple(int(r) for r in order)
        return order

    def allgather(self, x):
        out = self.base.allgather(x)
        return out[self._order()]

    def gather(self, x, root=0):
        out = self.base.gather(x, root=root)
        order = self._order()  # on every rank, the root's or not
        return None if out is None else out[order]


class WrongReduceScatterBlock(Wrapper):
    """``reduce_scatter`` gives rank ``r`` block ``(r + 1) % size`` of the
    reduction: an off-by-one in the block offset.

    Shows as each rank holding its neighbour's block, correctly reduced (so
    the blocks together are a permutation of the right ones). No effect on
    one rank.
    """

    name = "wrong_reduce_scatter_block"
    touches = frozenset(("reduce_scatter",))

    def reduce_scatter(self, x, op="sum"):
        a = x if isinstance(x, np.ndarray) else np.asarray(x)
        if self.size == 1 or a.ndim == 0 or a.shape[0] != self.size:  # the base's error, if any
            return self.base.reduce_scatter(x, op=op)
        return self.base.reduce_scatter(np.roll(a, -1, axis=0), op=op)  # block r of it is block r+1 of x


class ModifiesInput(Wrapper):
    """``allreduce``, ``reduce`` (on the root), ``reduce_scatter`` (into
    ``x[rank]``), ``broadcast`` (non-roots that pass an array) and
    ``alltoall`` also write the result into the caller's input, when it is a
    writeable numpy array: an in-place algorithm (``MPI_IN_PLACE``) used
    where the caller asked for a copy.

    Shows as inputs changed after the call (gradients overwritten, data
    reused in a later step wrong); results are right. Read-only inputs and
    inputs that are not numpy arrays are left alone.
    """

    name = "modifies_input"
    touches = frozenset(("allreduce", "reduce", "reduce_scatter", "broadcast", "alltoall"))

    def _write_back(self, x, out, block=None):
        if isinstance(x, np.ndarray) and x.flags.writeable and out is not None:
            target = x if block is None else x[block, ...]  # [r, ...]: a 0-d view, not a scalar
            if target.shape == out.shape and target.dtype == out.dtype:
                target[...] = out
        return out

    def allreduce(self, x, op="sum"):
        return self._write_back(x, self.base.allreduce(x, op=op))

    def reduce(self, x, root=0, op="sum"):
        return self._write_back(x, self.base.reduce(x, root=root, op=op))

    def reduce_scatter(self, x, op="sum"):
        return self._write_back(x, self.base.reduce_scatter(x, op=op), block=self.rank)

    def broadcast(self, x, root=0):
        return self._write_back(x, self.base.broadcast(x, root=root))

    def alltoall(self, x):
        return self._write_back(x, self.base.alltoall(x))


class ReusedResultBuffer(Wrapper):
    """Results are views of one internal buffer that the next call
    overwrites: a library that returns its receive buffer instead of a copy.

    Shows as a result that changes when a later collective runs (an earlier
    step's values turn into a later one's); each result is right when it is
    returned. The buffer grows as needed (results before a growth keep the
    old buffer). Empty results are not affected.
    """

    name = "reused_result_buffer"
    touches = frozenset(_DATA)

    def __init__(self, base, *, seed=0):
        super().__init__(base, seed=seed)
        self._buffer = np.empty(0, np.uint8)

    def _in_buffer(self, out):
        if out is None or out.nbytes == 0:
            return out
        if self._buffer.nbytes < out.nbytes:
            self._buffer = np.empty(max(out.nbytes, 2 * self._buffer.nbytes), np.uint8)
        view = self._buffer[: out.nbytes].view(out.dtype).reshape(out.shape)
        view[...] = out
        return view

    def allreduce(self, x, op="sum"):
        return self._in_buffer(self.base.allreduce(x, op=op))

    def reduce(self, x, root=0, op="sum"):
        return self._in_buffer(self.base.reduce(x, root=root, op=op))

    def reduce_scatter(self, x, op="sum"):
        return self._in_buffer(self.base.reduce_scatter(x, op=op))

    def broadcast(self, x, root=0):
        return self._in_buffer(self.base.broadcast(x, root=root))

    def allgather(self, x):
        return self._in_buffer(self.base.allgather(x))

    def gather(self, x, root=0):
        return self._in_buffer(self.base.gather(x, root=root))

    def scatter(self, x, root=0):
        return self._in_buffer(self.base.scatter(x, root=root))

    def alltoall(self, x):
        return self._in_buffer(self.base.alltoall(x))
