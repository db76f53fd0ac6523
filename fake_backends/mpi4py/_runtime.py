"""Installing the stand-in on a rank, and its per-run state.

``installed(comm)`` makes ``import mpi4py`` and ``from mpi4py import MPI``
give this package on the calling rank while the block runs, with
``MPI.COMM_WORLD`` on ``comm`` (the rank's simulator communicator), and
puts back whatever ``sys.modules`` held before (a real mpi4py included)
afterwards. ``simdist run`` does it for every rank of the simulator
backend; a function passed to ``World.run`` can do it too::

    def program(comm):
        with fake_backends.mpi4py.installed(comm):
            from mpi4py import MPI
            return MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank)

When the block ends normally, the engine first hands over every message
still queued (as MPI_Finalize would), so a rank that sends and returns at
once does not lose its messages.
"""

from __future__ import annotations

import contextlib
import sys

from simdist._errors import SimdistError

from ._p2p import Engine

NOT_RUNNING = (
    "simdist's mpi4py stand-in is not running on this process: run the program with "
    "`simdist run -n N prog.py`, or inside `with fake_backends.mpi4py.installed(comm):` on a rank"
)


class Runtime:
    """The stand-in's state on one rank for one run."""

    def __init__(self, world):
        self.world = world
        self.engine = Engine(world.transport)
        self.finalized = False
        self._self_ctx = -1
        self.states: list = []  # every communicator state of the run (see close)

    def close(self) -> None:
        """Drop every reference to the rank's SimComms. Comm objects the
        program keeps (in a module's globals, in a reference cycle) would
        otherwise keep views of the shared memory alive after the run."""
        for st in self.states:
            st.sc = st.engine = None
        self.states.clear()
        self.engine.close()
        self.engine = self.world = None

    def next_self_ctx(self) -> int:
        """A context for a new one-rank communicator (COMM_SELF, its Dups):
        negative, so never one of the SimComm contexts."""
        self._self_ctx -= 1
        return self._self_ctx


current: Runtime | None = None


def get() -> Runtime:
    if current is None:
        raise SimdistError(NOT_RUNNING)
    return current


def _check(comm) -> None:
    transport = getattr(comm, "transport", None)
    if transport is None:
        raise TypeError(
            f"the mpi4py stand-in needs a simulator communicator (World(n, backend='sim')), not {comm!r}; "
            "on backend='mpi' programs use the real mpi4py"
        )
    if list(transport.members) != list(range(transport.world_size)):
        raise TypeError("the mpi4py stand-in needs the world communicator of the rank (simdist.comm()), "
                        "not a sub-communicator")


@contextlib.contextmanager
def installed(comm):
    """Run the block with ``mpi4py`` (and ``mpi4py.MPI``) importable as the
    stand-in on ``comm``; yields the MPI module. See the module docstring."""
    global current
    _check(comm)
    if current is not None:
        raise SimdistError("the mpi4py stand-in is already installed on this rank")
    from . import MPI, rc  # noqa: F401 - MPI is the module the block imports
    from . import _comm

    package = sys.modules[__package__]
    saved = {name: mod for name, mod in sys.modules.items() if name == "mpi4py" or name.startswith("mpi4py.")}
    for name in saved:
        del sys.modules[name]
    rt = current = Runtime(comm)
    _comm.COMM_WORLD._state = _comm.world_state(rt)
    _comm.COMM_SELF._state = _comm.self_state(rt)
    rc.__init__()
    sys.modules["mpi4py"] = package
    sys.modules["mpi4py.MPI"] = MPI
    sys.modules["mpi4py.rc"] = rc
    ok = False
    try:
        yield MPI
        ok = True
    finally:
        try:
            if ok and not rt.finalized:
                rt.engine.flush()
        finally:
            current = None
            rt.close()
            _comm.COMM_WORLD._state = None
            _comm.COMM_SELF._state = None
            for name in [n for n in sys.modules if n == "mpi4py" or n.startswith("mpi4py.")]:
                del sys.modules[name]
            sys.modules.update(saved)
