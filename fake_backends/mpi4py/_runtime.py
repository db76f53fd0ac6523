"""The stand-in's per-run state on a rank: the runtime that ``installed``
(``_install``) creates and every communicator of the run reaches through
``current``.

Installations of one run
------------------------
A rank may install the stand-in several times in one ``World.run`` (two
``installed()`` blocks, or a block and the run-long installation of
``simdist.mpi4py_comm``). Each installation has an engine of its own, and
its records must never reach another's: a peer still in its first block
(finishing a collective, or flushing at the block's end) would otherwise
take the first records of this rank's second block and drop them with its
engine, and the second block would wait for them for ever ("waiting in
probe ... tag=5066825"). So the n-th installation of a run (counted per
rank from 0; every rank installs in the same order, as it calls
collectives) sends and probes its records with a transport tag of its own,
``TRANSPORT_TAG + (n << 32)``: the first is the plain ``TRANSPORT_TAG``.
Records of an earlier installation that nobody took (an ACK, a message
never received) are stashed by the transport when a later one probes past
them, and dropped with the run.
"""

from __future__ import annotations

import weakref

from simdist._errors import SimdistError

from ._hints import refresh_environment
from ._p2p import TRANSPORT_TAG, Engine

NOT_RUNNING = (
    "simdist's mpi4py stand-in is not running on this process: run the program with "
    "`simdist run -n N prog.py`; in a function run by World.run on the simulator, use "
    "`simdist.mpi4py_comm(comm)` or `with fake_backends.mpi4py.installed(comm):`"
)


class Runtime:
    """The stand-in's state on one rank for one installation."""

    def __init__(self, world):
        self.world = world
        # The engine reaches every process of the universe: the world's, and
        # those spawned (or their parents) beyond it. ``me`` is this
        # process's rank there, the "world rank" groups and ports hold.
        self.universe = world.transport.universe()
        self.me = self.universe.rank
        self.engine = Engine(_transport_of_installation(world, self.universe))
        self.parent = None  # a spawned process's state of Comm.Get_parent() (``_spawn``)
        self.appnum = 0  # which command of its Spawn_multiple a spawned process runs (MPI.APPNUM)
        self.finalized = False
        self.aborted = None  # the MPIAbort of this rank's first Comm.Abort: the rank ends with it, whatever follows
        self._self_ctx = -1
        self.states: dict = {}  # every communicator state of the run not freed, as keys (see close)
        self.at_close: list = []  # what to release when the run ends (open files, windows not freed)
        refresh_environment()

    def close(self) -> None:
        """Drop every reference to the rank's SimComms. Comm objects the
        program keeps (in a module's globals, in a reference cycle) would
        otherwise keep views of the shared memory alive after the run."""
        for release in self.at_close:
            release()
        self.at_close.clear()
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

# The world communicator of the last installation and how many the run has had (see the module docstring).
_last_world: weakref.ref | None = None
_installations = 0


def _transport_of_installation(world, universe):
    """The ``universe`` transport of ``world``, as the run's next installation must use it."""
    global _last_world, _installations
    same_run = _last_world is not None and _last_world() is world
    _installations = _installations + 1 if same_run else 0
    _last_world = weakref.ref(world)
    if _installations == 0:
        return universe
    return _TaggedTransport(universe, TRANSPORT_TAG + (_installations << 32))


class _TaggedTransport:
    """``transport`` with the engine's records under ``tag`` instead of ``TRANSPORT_TAG``."""

    def __init__(self, transport, tag: int):
        self._transport = transport
        self._tag = tag

    def __getattr__(self, name):  # rank, size, ring_bytes, record_bytes, ...
        return getattr(self._transport, name)

    def probe(self, source, tag, block=True):
        return self._transport.probe(source, self._tag if tag == TRANSPORT_TAG else tag, block=block)

    def recv(self, source, tag):
        return self._transport.recv(source, self._tag if tag == TRANSPORT_TAG else tag)

    def try_send(self, x, dest, tag):
        return self._transport.try_send(x, dest, self._tag if tag == TRANSPORT_TAG else tag)


#: Installs the stand-in for the rest of the run on a simulator rank inside
#: ``World.run``, or raises NOT_RUNNING (``_install.for_current_run``, which sets it).
install_for_current_run = None


def get() -> Runtime:
    """The current runtime; on a simulator rank inside ``World.run``, the
    first call of the run installs the stand-in for the rest of the run."""
    if current is None:
        install_for_current_run()
    return current


def check_world(comm) -> None:
    transport = getattr(comm, "transport", None)
    if transport is None:
        raise TypeError(
            f"the mpi4py stand-in needs a simulator communicator (World(n, backend='sim')), not {comm!r}; "
            "on backend='mpi' programs use the real mpi4py"
        )
    if transport.context != 0:  # the message key of a world's communicator (see Transport.universe)
        raise TypeError("the mpi4py stand-in needs the world communicator of the rank (simdist.comm()), "
                        "not a sub-communicator")
