"""The communicator contract: the one interface every backend implements.

The docstrings of :class:`Communicator` are the specification of each
collective. Backends refer to them and do not restate them.
"""

from __future__ import annotations

import abc
import numpy as np

__all__ = ["Communicator", "OPS", "COLLECTIVES", "REDUCTIONS", "ROOTED", "BLOCKED"]

#: Reduction ops, by name. ``mean`` is the ``sum`` divided by ``size``.
#: Bitwise ops take integer and bool dtypes; logical ops take integer and
#: bool dtypes and give 0/1 (False/True) in the input dtype.
OPS = ("sum", "prod", "min", "max", "mean", "band", "bor", "bxor", "land", "lor", "lxor")

#: The collectives of the contract, in the order of its docstrings
#: (point-to-point, split and free are not collectives of data).
COLLECTIVES = ("allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
               "reduce_scatter", "alltoall", "barrier")
#: Those that reduce with an op.
REDUCTIONS = ("allreduce", "reduce", "reduce_scatter")
#: Those with a root.
ROOTED = ("reduce", "broadcast", "gather", "scatter")
#: Those whose input is one block per rank, shape ``(size, ...)``.
BLOCKED = ("scatter", "reduce_scatter", "alltoall")


class Communicator(abc.ABC):
    """A group of ``size`` ranks that run the same program (SPMD).

    Every rank of a communicator must make the same sequence of collective
    calls on it, with the same collective, op, root, dtype and shape (where
    the collective says so). Collectives may synchronise the ranks; programs
    must not rely on them not doing so.

    **Arrays.** Inputs are numpy arrays of any shape, 0-d and empty included,
    contiguous or not, writeable or read-only, of dtype bool, int8-int64,
    uint8-uint64, float16, float32, float64, complex64 or complex128. Objects
    that are not arrays are converted with ``numpy.asarray``. Inputs are never
    modified. Results are new arrays that own their memory, of the input's
    dtype and shape except where a collective says ``(size, ...)``.

    **Reductions** fold the ranks' arrays element by element with ``op``.
    The exact order of the fold is the backend's to document; the simulator
    folds in ascending rank order in the input dtype, ``((x0 op x1) op x2)
    ...``, so its results are identical to the bit on every rank and in every
    run. NaN and Inf propagate as IEEE 754 says. ``sum``, ``prod`` and
    ``mean`` are not defined on bool, ``mean`` not on integers (it would
    truncate: reduce with ``sum`` and divide), ``min``/``max`` not on complex,
    bitwise and logical ops only on integers and bool.

    **Errors.** An argument a collective cannot accept raises
    :class:`simdist.InvalidType` (a ``TypeError``) or
    :class:`simdist.InvalidValue` (a ``ValueError``) naming the rank, the
    collective, the argument and its value. Ranks whose calls do not match
    raise :class:`simdist.CollectiveMismatch` on every rank of the call.
    """

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This rank's index in the communicator, ``0 <= rank < size``."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of ranks in the communicator."""

    @abc.abstractmethod
    def allreduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Reduce ``x`` over all ranks with ``op``; every rank gets the result.

        Every rank passes an array of the same dtype and shape. The result has
        that dtype and shape and is identical to the bit on every rank.
        """

    @abc.abstractmethod
    def reduce(self, x: np.ndarray, root: int = 0, op: str = "sum") -> np.ndarray | None:
        """Reduce ``x`` over all ranks with ``op``; only ``root`` gets the result.

        The same result as :meth:`allreduce` on ``root``; ``None`` elsewhere.
        """

    @abc.abstractmethod
    def broadcast(self, x: np.ndarray | None, root: int = 0) -> np.ndarray:
        """Return a copy of ``root``'s ``x`` on every rank.

        Non-roots may pass ``None``; a non-root that passes an array must pass
        one of root's dtype and shape.
        """

    @abc.abstractmethod
    def allgather(self, x: np.ndarray) -> np.ndarray:
        """Stack every rank's ``x`` in rank order; every rank gets the stack.

        Every rank passes the same dtype and shape; the result is
        ``np.stack([x_0, ..., x_{size-1}])``, of shape ``(size, *x.shape)``.
        The stack has one dimension more than ``x``, so ``x`` may have one
        fewer than numpy's limit (63 of 64): more raises InvalidValue.
        """

    @abc.abstractmethod
    def gather(self, x: np.ndarray, root: int = 0) -> np.ndarray | None:
        """The :meth:`allgather` stack on ``root``; ``None`` elsewhere."""

    @abc.abstractmethod
    def scatter(self, x: np.ndarray | None, root: int = 0) -> np.ndarray:
        """Rank ``r`` gets ``x[r]`` of ``root``'s ``x``.

        ``root`` passes an array of shape ``(size, ...)``; non-roots pass
        ``None`` (or an array of root's dtype and shape, which is ignored).
        """

    @abc.abstractmethod
    def reduce_scatter(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Rank ``r`` gets the reduction over ranks ``j`` of ``x_j[r]``.

        Every rank passes the same dtype and a shape ``(size, ...)``; rank
        ``r``'s result equals block ``r`` of ``allreduce(x, op)``, to the bit.
        """

    @abc.abstractmethod
    def alltoall(self, x: np.ndarray) -> np.ndarray:
        """Rank ``r`` gets ``out`` with ``out[j] = x_j[r]``.

        Every rank passes the same dtype and a shape ``(size, ...)``; the
        result has that shape. Applied twice it is the identity.
        """

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return only once every rank of the communicator has called it."""

    @abc.abstractmethod
    def send(self, x: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send a copy of ``x`` to rank ``dest`` with the integer ``tag``.

        Messages from one rank to another with one tag arrive in the order
        they were sent. ``send`` may return before the message is received
        (small messages are buffered) or wait until ``dest`` receives it, as
        MPI's standard-mode send may; a program where two ranks each send a
        large message to the other before receiving can therefore hang.
        """

    @abc.abstractmethod
    def recv(self, source: int, tag: int = 0) -> np.ndarray:
        """Receive the next message from rank ``source`` with ``tag``.

        Returns a new array with the dtype and shape the sender sent.
        """

    @abc.abstractmethod
    def split(self, color: int | None, key: int = 0) -> "Communicator | None":
        """Partition the ranks into sub-communicators, as ``MPI_Comm_split``.

        Collective over this communicator. Ranks passing the same ``color``
        (an int >= 0) form one sub-communicator, ordered by ``key`` and then
        by their rank here. A rank passing ``color=None`` gets ``None``.
        Sub-communicators are communicators of their own: their collectives
        run concurrently with those of other sub-communicators, and their
        reductions fold in their own rank order.
        """

    def free(self) -> None:
        """Release the communicator; collective over its ranks.

        Optional: a communicator not freed is released when the function
        passed to ``World.run`` returns. Backends without resources to
        release need not override it.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank} of {self.size}>"

