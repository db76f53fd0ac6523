"""MPI sessions: ``MPI.Session``, ``SESSION_NULL``, ``Group.Create_from_session_pset``,
``Intracomm.Create_from_group``.

A session (``Session.Init``) names the process sets Open MPI names:
``"mpi://WORLD"`` (the ranks of ``simdist run -n N``), ``"mpi://SELF"``
(the calling process) and ``"mpix://SHARED"`` (the ranks on this
machine: all of them); ``Get_pset_info`` gives their ``mpi_size``, and
``Create_group`` their group. ``Intracomm.Create_from_group(group,
stringtag)`` makes a communicator of a group without a parent
communicator: collective over the group's processes only, which pass the
same group and string tag. The group's first process picks the context
and sends it to the others in the world's context with bits 59 and 61
flipped (a context of its own) and a tag derived from the string tag, so
that concurrent calls with different tags do not mix (``_groupcomm``'s
``create_group`` does the handshake). A session's errors go through its
error handler (``Session.Set_errhandler``), as a communicator's do.
Buffered mode on a session (MPI 4.1) is refused: NotImplementedError, as
mpi4py raises for calls an MPI library lacks.
"""

from __future__ import annotations

import types
import zlib

from . import _errhandlers, _runtime
from ._comm import COMM_WORLD, Intracomm, _State
from ._errors import ERR_ARG, ERR_GROUP, Exception as MPIException, unsupported
from ._groupcomm import create_group
from ._groups import Group
from ._handles import Handle, IntegerHandles, check_handle, new_handle
from ._hints import INFO_NULL, Info
from ._names import CONSTANTS
from ._pointtopoint import TAG_UB

ERR_SESSION = CONSTANTS["ERR_SESSION"]
_FROM_GROUP_BIT = 1 << 61  # flipped on the world's context; create_group flips HANDSHAKE_BIT (59)
PSETS = ("mpi://WORLD", "mpi://SELF", "mpix://SHARED")  # Open MPI's three; every rank shares one machine


class _SessionState:
    """A live session: its error handler (and a name for its errors)."""

    __slots__ = ("errhandler", "name")

    def __init__(self, errhandler):
        self.errhandler, self.name = errhandler, "a session"


class Session(Handle, IntegerHandles):
    """An MPI session (see the module docstring); the calls are mpi4py's."""

    def _init(self, session: "Session | None" = None) -> None:
        if session is not None:
            check_handle(session, Session, type(self))
        self._state = None if session is None else session._state

    def __eq__(self, other):
        if not isinstance(other, Session):
            return NotImplemented
        return self._state is other._state

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __bool__(self):
        return self._state is not None

    def __repr__(self):
        return f"<mpi4py.MPI.Session {'MPI_SESSION_NULL' if self._state is None else hex(id(self._state))} (simdist)>"

    def _live(self):
        return self._state

    def _st(self) -> _SessionState:
        if self._state is None:
            raise MPIException(ERR_SESSION, "the session is MPI.SESSION_NULL")
        return self._state

    @classmethod
    def Init(cls, info=INFO_NULL, errhandler=None) -> "Session":
        """A new session (its error handler ``errhandler``, or the one
        ``mpi4py.rc.errors`` names)."""
        _runtime.get()
        if errhandler is not None:
            errhandler = _errhandlers.checked(errhandler, "Session.Init")
        session = new_handle(cls)
        session._state = _SessionState(errhandler if errhandler is not None else _errhandlers.default())
        return session

    def Finalize(self) -> None:
        """End the session; the handle becomes MPI.SESSION_NULL."""
        self._st()
        self._state = None

    def free(self) -> None:
        """Finalize if not null."""
        if self:
            self.Finalize()

    # -- process sets ------------------------------------------------------------------
    def Get_num_psets(self, info=INFO_NULL) -> int:
        self._st()
        return len(PSETS)

    def Get_nth_pset(self, n: int, info=INFO_NULL) -> str:
        self._st()
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < len(PSETS):
            raise MPIException(ERR_ARG, f"Session.Get_nth_pset({n!r}): there are {len(PSETS)} process sets")
        return PSETS[n]

    def _pset(self, pset_name, call: str) -> tuple:
        """The world ranks of the process set ``pset_name``."""
        self._st()
        world = _runtime.get().world
        if pset_name in (PSETS[0], PSETS[2]):
            return tuple(world.transport.members)
        if pset_name == PSETS[1]:
            return (_runtime.get().me,)
        raise MPIException(ERR_ARG, f"Session.{call}({pset_name!r}): the process sets are {', '.join(PSETS)}")

    def Get_pset_info(self, pset_name: str) -> Info:
        return Info.Create({"mpi_size": str(len(self._pset(pset_name, "Get_pset_info")))})

    def Create_group(self, pset_name: str) -> Group:
        return Group._from_ranks(self._pset(pset_name, "Create_group"))

    def Get_info(self) -> Info:
        """A new info with the session's thread level, for the caller to Free."""
        self._st()
        return Info.Create({"thread_level": "MPI_THREAD_SERIALIZED"})

    # -- error handling ------------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        """A user error handler: ``errhandler_fn(session, errorcode)``."""
        return _errhandlers.Errhandler._user(errhandler_fn)

    def Get_errhandler(self):
        return _errhandlers.Errhandler(self._st().errhandler)

    def Set_errhandler(self, errhandler) -> None:
        st = self._st()
        st.errhandler = _errhandlers.checked(errhandler, "Session.Set_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        st = self._st()
        _errhandlers.invoke(self, st, MPIException(errorcode, "Call_errhandler"), "Session.Call_errhandler")

    # -- buffered mode (MPI 4.1) -----------------------------------------------------------
    def _buffered(self, name: str):
        raise unsupported(f"Session.{name}", "buffered mode on sessions is MPI 4.1; the simulated MPI is MPI 3.1: "
                          "attach the buffer with MPI.Attach_buffer")

    def Attach_buffer(self, buf) -> None:
        self._buffered("Attach_buffer")

    def Detach_buffer(self):
        self._buffered("Detach_buffer")

    def Flush_buffer(self) -> None:
        self._buffered("Flush_buffer")

    def Iflush_buffer(self):
        self._buffered("Iflush_buffer")


def create_from_session_pset(cls, session: Session, pset_name: str) -> Group:
    """``Group.Create_from_session_pset``: the group of a process set."""
    return session.Create_group(pset_name)


def stringtag_tag(stringtag: str) -> int:
    """The message tag of a string tag's handshakes."""
    return zlib.crc32(stringtag.encode()) % (TAG_UB + 1)


def create_from_group(cls, group: Group, stringtag: str = "org.mpi4py", info=INFO_NULL, errhandler=None):
    """MPI_Comm_create_from_group (see the module docstring)."""
    if not isinstance(group, Group):
        raise TypeError(f"Argument 'group' has incorrect type (expected mpi4py.MPI.Group, got "
                        f"{type(group).__name__})")
    if not isinstance(stringtag, str):
        raise TypeError(f"Create_from_group: stringtag must be a str, got {type(stringtag).__name__}")
    if errhandler is not None:
        errhandler = _errhandlers.checked(errhandler, "Create_from_group")
    world = COMM_WORLD._st()
    ranks = group._ranks("Create_from_group")
    me = world.members[world.rank]
    if me not in ranks:
        raise MPIException(ERR_GROUP, f"Create_from_group: world rank {me} is not in the group {list(ranks)}")
    name = f"Create_from_group(stringtag={stringtag!r})"
    handshake = types.SimpleNamespace(engine=world.engine, members=world.members, rank=world.rank,
                                      ctx=world.ctx ^ _FROM_GROUP_BIT, name=name)
    world.engine.progress()
    sc = create_group(handshake, ranks, stringtag_tag(stringtag))
    st = _State(world.rt, sc, sc.transport.context, list(ranks), name)
    if errhandler is not None:
        st.errhandler = errhandler
    comm = Intracomm()
    comm._state = st
    return comm


_errhandlers.guard_calls(Session, lambda session: session if session else COMM_WORLD)
SESSION_NULL = Session()
