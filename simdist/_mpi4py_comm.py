"""Collectives written with mpi4py, on every backend: ``mpi4py_comm(base)``
gives the rank's mpi4py communicator for its run, and
``Mpi4pyCommunicator`` makes functions written against it a communicator.

``base`` is the communicator a function run by ``World.run`` receives (a
factory's argument). On the simulator the mpi4py communicator is
``MPI.COMM_WORLD`` of the simulated mpi4py (``fake_backends.mpi4py``),
installed on ``base`` for the rest of the run; on the MPI backend it is a
duplicate of the MPI communicator the run's ``base`` uses (a ``Dup`` of
``MPI_COMM_WORLD``), made at the first call of the run and freed when the
next run starts. Either way its messages never match ``base``'s
``send``/``recv`` (the stand-in's travel under a transport tag of their
own; the duplicate is another MPI context), so a factory may mix both.
"""

from __future__ import annotations

import inspect

from ._communicator import COLLECTIVES, Communicator
from ._errors import InvalidType, InvalidValue, SimdistError
from ._worker import comm as current_comm

__all__ = ["mpi4py_comm", "Mpi4pyCommunicator"]

#: The calls ``Mpi4pyCommunicator`` takes functions for.
CALLS = (*COLLECTIVES, "send", "recv")

#: Why a sub-communicator has no mpi4py communicator (the simulated mpi4py has its world only).
NOT_THE_WORLD = ("base must be the world communicator of the run, not a sub-communicator; "
                 "split the mpi4py communicator instead: simdist.mpi4py_comm(comm).Split(color, key)")
_NOT_A_RUN_COMM = (
    "must be the communicator World.run passed to the function (simdist.comm()), on the sim or mpi "
    "backend; a communicator that wraps it has no mpi4py communicator of its own: pass the one it wraps"
)


def mpi4py_comm(base=None):
    """The mpi4py communicator of this rank's run, on ``base``.

    ``base`` is the communicator ``World.run`` passed to the function (the
    default: ``simdist.comm()``): the world of the run, not a sub-communicator.
    On the simulator the result is ``MPI.COMM_WORLD`` of the simulated
    mpi4py, installed on ``base`` at the first call and until the run's
    function returns (then queued messages are handed over, as
    ``MPI_Finalize`` would). Under ``backend="mpi"`` it is a duplicate of
    the run's MPI communicator (``MPI_Comm_dup``, so the first call of a run
    is collective: make it on every rank), freed when the next run starts.
    Later calls in the same run return the same communicator; it is valid
    until the run's function returns. Raises :class:`simdist.InvalidType`
    for anything but a run's world communicator.
    """
    if base is None:
        base = current_comm()
    dup = getattr(base, "mpi4py_dup", None)
    if dup is not None:  # the MPI backend (simdist.mpi)
        return dup()
    if getattr(base, "transport", None) is not None:  # the simulator
        return _stand_in_world(base)
    raise InvalidType(f"mpi4py_comm(base={base!r}): base {_NOT_A_RUN_COMM}")


def _stand_in_world(base):
    # On a simulator rank `import mpi4py` gives the simulated mpi4py (simdist.sim's import redirection).
    import mpi4py

    if not getattr(mpi4py, "simulated", False):  # pragma: no cover - the redirection is always in place
        raise SimdistError(f"rank {base.rank}: mpi4py_comm: mpi4py on this simulator rank is not the "
                           f"simulated mpi4py but {mpi4py.__file__}")
    from ._worker import _current

    if base.transport.context != 0:  # the message key of a world communicator (Transport.universe)
        raise InvalidType(f"rank {base.rank}: mpi4py_comm: {NOT_THE_WORLD}")
    if base is not _current:
        raise InvalidValue(f"rank {base.rank}: mpi4py_comm(base={base!r}): base {_NOT_A_RUN_COMM}")
    return mpi4py.installed_for_run(base)


class Mpi4pyCommunicator:
    """A communicator whose given calls are functions written with mpi4py,
    and whose other calls are ``base``'s.

    Each function receives the run's mpi4py communicator
    (:func:`mpi4py_comm`) followed by the contract's arguments, in the
    contract's order and with its defaults filled in: ``allreduce(comm, x,
    op)``, ``reduce(comm, x, root, op)``, ``broadcast(comm, x, root)``,
    ``allgather(comm, x)``, ``gather(comm, x, root)``, ``scatter(comm, x,
    root)``, ``reduce_scatter(comm, x, op)``, ``alltoall(comm, x)``,
    ``barrier(comm)``, ``send(comm, x, dest, tag)``, ``recv(comm, source,
    tag)``; ``op`` is the contract's name ("sum", "max", ...). A function
    that does not support an op or dtype should raise
    :class:`simdist.InvalidValue` (or ``InvalidType``) saying "not
    supported", on every rank, so that ``simdist check`` reports it as
    unsupported rather than failed. ``rank``, ``size``, ``split`` (whose
    sub-communicators are ``base``'s) and every call not given are ``base``'s.
    A factory for ``simdist check`` and the property suite::

        def make(base):
            return simdist.Mpi4pyCommunicator(base, allreduce=ring_allreduce)

    Make one per run (a factory is called once per ``World.run``): the
    mpi4py communicator lasts for the run.
    """

    def __init__(self, base, **functions):
        unknown = sorted(set(functions) - set(CALLS))
        if unknown:
            raise InvalidValue(f"Mpi4pyCommunicator: {', '.join(unknown)} is not a call of the contract; "
                               f"give functions for {', '.join(CALLS)}")
        self.base = base
        self.comm = mpi4py_comm(base)
        for name, fn in functions.items():
            if not callable(fn):
                raise InvalidType(f"Mpi4pyCommunicator: {name}={fn!r} must be a function")
            setattr(self, name, _contract_call(name, fn, self.comm))

    def __getattr__(self, name):  # rank, size, split and the calls not given: the base's
        if name == "base":  # not set: __init__ failed
            raise AttributeError(name)
        return getattr(self.base, name)

    def __repr__(self) -> str:
        own = sorted(n for n in CALLS if n in vars(self))
        return f"Mpi4pyCommunicator({', '.join(own)} with mpi4py, the rest {self.base!r})"


def _contract_call(name: str, fn, comm):
    """``fn(comm, ...)`` called as the contract's ``name`` is."""
    signature = inspect.signature(getattr(Communicator, name))

    def call(*args, **kwargs):
        bound = signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        return fn(comm, *list(bound.arguments.values())[1:])

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(Communicator, name).__doc__
    return call
