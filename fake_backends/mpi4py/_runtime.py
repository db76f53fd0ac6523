"""The stand-in's per-run state on a rank: the runtime that ``installed``
(``_install``) creates and every communicator of the run reaches through
``current``."""

from __future__ import annotations

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


def check_world(comm) -> None:
    transport = getattr(comm, "transport", None)
    if transport is None:
        raise TypeError(
            f"the mpi4py stand-in needs a simulator communicator (World(n, backend='sim')), not {comm!r}; "
            "on backend='mpi' programs use the real mpi4py"
        )
    if list(transport.members) != list(range(transport.world_size)):
        raise TypeError("the mpi4py stand-in needs the world communicator of the rank (simdist.comm()), "
                        "not a sub-communicator")
