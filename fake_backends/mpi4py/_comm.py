"""Communicators of the stand-in: Comm and Intracomm, COMM_WORLD, COMM_SELF.

A communicator object is a handle on a ``_State``: the rank's SimComm for
it (the world's for COMM_WORLD, one from ``SimComm.split`` for each Dup and
Split, and a local one-rank communicator for COMM_SELF and its Dups), its
context (the key of its point-to-point messages), its members as world
ranks, and the progress engine of the rank. Copies of a handle
(``MPI.Comm(comm)``) share the state and compare equal; ``Free`` and
``Split(MPI.UNDEFINED)`` give handles equal to ``MPI.COMM_NULL``.

Point-to-point calls (``_pointtopoint``) go through the progress engine (``_p2p``), collectives
through the SimComm (``_collectives``, ``_vector``, ``_objects``).
"""

from __future__ import annotations

import numpy as np

from simdist._arguments import check_op

from . import _runtime
from ._collectives import BufferCollectives
from . import _commctx, _errhandlers, _handleleaks
from ._errors import ERR_ARG, ERR_COMM, ERR_KEYVAL, ERR_OTHER, Exception as MPIException, MPIAbort
from ._attributes import AttributeCalls, copy_attributes, delete_attributes
from ._thread_failures import failed_in_a_thread
from ._errors import earlier_run, last_used_code
from ._datatypes import Datatype
from ._groups import GroupCalls
from ._handles import FreeableHandles, Handle, IntegerHandles, check_handle, is_constant, new_handle
from ._hints import Errhandler, Info
from ._ops import Op
from ._nbcoll import NonblockingCollectives
from ._objects import ObjectCollectives
from ._p2p import ANY_SOURCE, PROC_NULL
from ._partitioned import PartitionedCalls
from ._pointtopoint import TAG_UB, PointToPoint, c_int
from ._pointtopoint import sent
from ._requests import Request
from ._ulfm import FaultTolerance
from ._vector import VectorCollectives

UNDEFINED = -32766
#: The handle class of each topology kind (filled by ``_topologies``, which builds on this module).
CLASS_OF_TOPOLOGY: dict = {}
INTERCOMM_CLASS: list = []  # MPI.Intercomm (filled by ``_intercomm``, which builds on this module)
IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3
COMM_TYPE_SHARED = 0
# attribute keys, as Open MPI numbers them
KEYVAL_INVALID, TAG_UB_KEY, HOST, IO, WTIME_IS_GLOBAL, APPNUM, LASTUSEDCODE, UNIVERSE_SIZE = -1, 0, 1, 2, 3, 4, 5, 6


class _SelfComm:
    """The collectives of a one-rank communicator (COMM_SELF and its Dups):
    every result is a copy of the rank's own input."""

    rank, size = 0, 1

    def allreduce(self, x, op="sum"):
        x = np.asarray(x)
        check_op(op, x.dtype, 0, "allreduce")
        return np.array(x, copy=True)

    def reduce(self, x, root=0, op="sum"):
        return self.allreduce(x, op)

    def reduce_scatter(self, x, op="sum"):
        return self.allreduce(x, op)[0]

    def broadcast(self, x, root=0):
        return np.array(x, copy=True)

    def allgather(self, x):
        return np.array(x, copy=True)[None]

    def gather(self, x, root=0):
        return self.allgather(x)

    def scatter(self, x, root=0):
        return np.array(x[0], copy=True)

    def alltoall(self, x):
        return np.array(x, copy=True)

    def alltoall_sized(self, sizes, pack, unpack, expected, rows=None, own=None):
        block = np.empty(sizes[0], np.uint8)
        pack(0, 0, block)
        if list(sizes) == list(expected):
            unpack(0, 0, block)
        return list(sizes), False

    def barrier(self):
        pass

    def split(self, color, key=0):
        return None if color is None else _SelfComm()

    def free(self):
        pass


class _State:
    """What a communicator handle refers to (see the module docstring)."""

    inter = False  # True on an intercommunicator's (``_intercomm``)
    __slots__ = ("sc", "ctx", "members", "rank", "size", "name", "rt", "engine", "predefined", "freed", "_errhandler",
                 "locks", "topo", "group", "attrs", "commctx", "coll_seq", "repeats")

    def __init__(self, rt, sc, ctx: int, members: list[int], name: str, predefined: bool = False, parent=None):
        self.rt, self.engine = rt, rt.engine
        self.sc, self.ctx, self.members = sc, ctx, members
        self.rank, self.size = sc.rank, sc.size
        self.name, self.predefined, self.freed = name, predefined, False
        # a predefined communicator's is chosen at its first use, after the program set mpi4py.rc
        self._errhandler = None if parent is None else _errhandlers.default(parent.errhandler)
        self.locks: dict = {}  # MPI._comm_lock_table (``_locks``)
        self.topo = None  # a topology communicator's (``_topologies``)
        self.group = None  # what Get_group gives handles on (``_groups``)
        self.attrs: dict = {}  # the user attributes (``_attributes``)
        self.commctx = None  # MPI._commctx_intra's private duplicate (``_commctx``)
        self.coll_seq = 0  # collectives called so far (``_nbschedule``)
        self.repeats: dict = {}  # the compiled transposes, by call (``_vector``)
        rt.states[self] = None
        if not predefined:
            _handleleaks.handle_made(self, "communicator")

    @property
    def errhandler(self):
        if self._errhandler is None:
            self._errhandler = _errhandlers.default()
        return self._errhandler

    @errhandler.setter
    def errhandler(self, errhandler) -> None:
        self._errhandler = errhandler


def world_state(rt) -> _State:
    transport = rt.world.transport
    return _State(rt, rt.world, transport.context, list(transport.members), "MPI_COMM_WORLD", True)


def self_state(rt) -> _State:
    return _State(rt, _SelfComm(), rt.next_self_ctx(), [rt.me], "MPI_COMM_SELF", True)


class Comm(Handle, FreeableHandles, IntegerHandles, GroupCalls, PointToPoint, PartitionedCalls, BufferCollectives,
           VectorCollectives, ObjectCollectives, NonblockingCollectives, AttributeCalls, FaultTolerance):
    """A communicator: see the module docstring; the calls are mpi4py's."""

    _fixed = None  # "COMM_WORLD"/"COMM_SELF" for the predefined handles
    _attr_kind = "Comm"

    def _attributes(self) -> dict:
        return self._st().attrs

    def _attribute_handle(self) -> "Comm":
        handle = new_handle(type(self))
        handle._state = self._st()
        return handle

    def _make_null(self) -> None:
        self._state = None

    def _init(self, comm: "Comm | None" = None) -> None:
        if comm is not None:
            check_handle(comm, Comm, type(self))
        self._state = None if comm is None else comm._state

    # -- identity ---------------------------------------------------------------------
    def __repr__(self):
        st = self._live()
        return f"<mpi4py.MPI.{type(self).__name__} {st.name if st else 'MPI_COMM_NULL'} (simdist)>"

    def _st(self) -> _State:
        """The state, or the error of a null, freed, finalized communicator
        or one of an earlier run."""
        st = self._state
        if st is None and self._fixed is not None:
            _runtime.get()  # installs the stand-in for the run on a simulator rank, or raises
            st = self._state
        if st is None:
            raise MPIException(ERR_COMM, "the communicator is MPI.COMM_NULL")
        if st.rt is not _runtime.current:  # only one runtime is ever open: st's has ended
            raise earlier_run(st.members[st.rank], f"{st.name}, a communicator")
        if st.freed:
            raise MPIException(ERR_COMM, f"the communicator ({st.name}) was freed")
        if st.rt.finalized:
            raise MPIException(ERR_OTHER, "MPI.Finalize() was called; no MPI calls may follow")
        return st

    def _new(self, st: _State, cls=None) -> "Intracomm":
        comm = new_handle(cls or Intracomm)
        comm._state = st
        _handleleaks.handle_given(comm, st)
        return comm

    # -- size and rank ------------------------------------------------------------------
    def Get_size(self) -> int:
        return self._st().size

    def Get_rank(self) -> int:
        return self._st().rank

    size = property(Get_size)
    rank = property(Get_rank)

    def Get_name(self) -> str:
        """The communicator's name ("MPI_COMM_NULL" for a null one, as under Open MPI)."""
        if self._live() is None and self._fixed is None:
            return "MPI_COMM_NULL"
        return self._st().name

    def Set_name(self, name: str) -> None:
        st = self._st()
        st.name = str(name)
        naming = getattr(st.sc, "set_name", None)  # the simulator's reports name it too
        if naming is not None:
            naming(st.name)

    name = property(Get_name, Set_name)

    def Is_inter(self) -> bool:
        self._st()
        return False

    def Is_intra(self) -> bool:
        self._st()
        return True

    def Get_topology(self) -> int:
        """MPI.CART, MPI.GRAPH, MPI.DIST_GRAPH or MPI.UNDEFINED."""
        topo = self._st().topo
        return UNDEFINED if topo is None else topo.kind

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)
    topology = property(Get_topology)
    is_topo = property(lambda self: self.Get_topology() != UNDEFINED)

    def Compare(self, comm: "Comm") -> int:
        a, b = self._st(), comm._st()
        if a is b:
            return IDENT
        if a.members == b.members:
            return CONGRUENT
        return SIMILAR if sorted(a.members) == sorted(b.members) else UNEQUAL

    def Get_attr(self, keyval: int):
        """The predefined attributes (MPI.TAG_UB, ...) and the user's (``_attributes``)."""
        st = self._st()
        if keyval == KEYVAL_INVALID:
            raise MPIException(ERR_KEYVAL, f"Get_attr(MPI.KEYVAL_INVALID) on {st.name}")
        values = {TAG_UB_KEY: TAG_UB, HOST: PROC_NULL, IO: ANY_SOURCE, WTIME_IS_GLOBAL: False, APPNUM: st.rt.appnum,
                  LASTUSEDCODE: last_used_code(), UNIVERSE_SIZE: st.rt.universe.universe_size()}
        if keyval in values:
            return values[keyval]
        return self._user_attr(keyval)

    def Get_errhandler(self):
        """A new handle on the communicator's error handler (see ``_errhandlers``)."""
        return _errhandlers.Errhandler(self._st().errhandler)

    def Set_errhandler(self, errhandler) -> None:
        """MPI.ERRORS_RETURN: errors raise MPI.Exception; MPI.ERRORS_ARE_FATAL
        and MPI.ERRORS_ABORT: an error ends the job; a user handler is called,
        then the error raises."""
        st = self._st()
        st.errhandler = _errhandlers.checked(errhandler, "Set_errhandler")

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        """A user error handler: ``errhandler_fn(comm, errorcode)``."""
        return _errhandlers.Errhandler._user(errhandler_fn)

    def Call_errhandler(self, errorcode: int) -> None:
        """Apply the communicator's error handler to ``errorcode``; under
        MPI.ERRORS_RETURN nothing happens, as in MPI."""
        st = self._st()
        _errhandlers.invoke(self, st, MPIException(errorcode, "Call_errhandler"), "Comm.Call_errhandler")

    def Get_info(self):
        """A new info (hints are not simulated: it is empty), for the caller to Free."""
        self._st()
        return Info.Create()

    def Set_info(self, info) -> None:
        self._st()

    info = property(Get_info, Set_info)

    @classmethod
    def fromint(cls, arg: int) -> "Comm":
        """A new handle on the communicator of ``arg`` (from ``toint``), of
        its own class, as mpi4py's (a Cartesian one gives a Cartcomm)."""
        handle = super().fromint(arg)
        st = handle._live()
        if st is None:
            return handle
        if st.inter:
            return INTERCOMM_CLASS[0](handle)
        return (Intracomm if st.topo is None else CLASS_OF_TOPOLOGY[st.topo.kind])(handle)

    f2py = fromint

    # -- communicators ------------------------------------------------------------------
    def Dup(self, info=None) -> "Intracomm":
        """A new communicator with the same ranks (collective)."""
        st = self._st()
        st.engine.progress()
        sc = st.sc.split(0, st.rank)
        new = self._derived(st, sc, "Dup")
        new.topo = st.topo  # a Dup keeps the topology, and the handle's class
        dup = self._new(new, type(self))  # of the caller's class, as mpi4py's
        copy_attributes(self, dup, "Comm.Dup")
        return dup

    Clone = Dup

    def Dup_with_info(self, info) -> "Intracomm":
        return self.Dup(info)

    def Idup(self, info=None):
        """(Dup, a request): the Dup is made at once (MPI's order of
        collectives on the communicator is kept), the request is complete."""
        comm = self.Dup(info)
        return comm, Request._of(self._st().engine, sent())

    Idup_with_info = Idup

    def _derived(self, st, sc, how) -> _State:
        if isinstance(sc, _SelfComm):
            return _State(st.rt, sc, st.rt.next_self_ctx(), list(st.members), f"{how} of {st.name}", parent=st)
        return _State(st.rt, sc, sc.transport.context, list(sc.transport.members), f"{how} of {st.name}",
                      parent=st)

    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        """MPI_Comm_split (collective): ranks of one ``color`` (an int >= 0)
        form a communicator ordered by ``key``, then rank; ``MPI.UNDEFINED``
        gives ``MPI.COMM_NULL``."""
        st = self._st()
        color, key = c_int(color, "color"), c_int(key, "key")  # as mpi4py converts: True is 1, 2.0 is 2
        if color < 0 and color != UNDEFINED:
            raise MPIException(ERR_ARG, f"Split: color={color!r} must be an int >= 0 or MPI.UNDEFINED")
        st.engine.progress()
        sc = st.sc.split(None if color == UNDEFINED else color, key)
        if sc is None:
            return COMM_NULL
        return self._new(self._derived(st, sc, f"Split(color={color})"))

    def Split_type(self, split_type: int, key: int = 0, info=None) -> "Intracomm":
        """``MPI.COMM_TYPE_SHARED``: every simulated rank shares one machine,
        so this is ``Split(0, key)``."""
        if split_type == UNDEFINED:
            return self.Split(UNDEFINED, key)
        if split_type != COMM_TYPE_SHARED:
            from ._errors import unsupported

            raise unsupported(f"Split_type({split_type})", "use MPI.COMM_TYPE_SHARED or Split")
        return self.Split(0, key)

    def Free(self) -> None:
        """Release the communicator; the handle becomes COMM_NULL. Every
        rank calls it and none waits for the others (as in Open MPI and
        MPICH), so a destructor may free it at another point on each rank."""
        st = self._st()
        if st.predefined:
            raise MPIException(ERR_COMM, f"{st.name} cannot be freed")
        delete_attributes(self, "Comm.Free")
        st.engine.progress()
        _commctx.free(st)
        st.sc.free()
        st.freed = True
        st.sc = None  # no view of the shared memory outlives the run through a freed handle kept
        st.rt.states.pop(st, None)  # nor grows a run that splits and frees per transform
        _handleleaks.handle_freed(st)

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's ``free``); a handle on a
        predefined communicator becomes null, the predefined object stays."""
        if is_constant(self) or not self:
            return
        if self._st().predefined:
            self._state = None
        else:
            self.Free()

    def Disconnect(self) -> None:
        """Free the communicator (collective), as MPI_Comm_disconnect does
        with one that no dynamic process function made; the handle becomes COMM_NULL."""
        self.Free()

    def Abort(self, errorcode: int = 0):
        """End the job: ``simdist run`` exits with ``errorcode``. From another
        thread than the main one, the main thread is ended too, as MPI_Abort
        ends the whole process (mpi4py's pool aborts from its thread).

        MPI_Abort never returns, so the rank ends with this abort even if
        the program catches what it raises (a ``finally`` that calls
        ``sys.exit(0)``, as schwimmbad's pool has): the installation raises
        it again when the program ends (``_install``), and the program's
        threads are not waited for nor its ``atexit`` handlers run, as in a
        killed process."""
        from simdist._main import end_as_killed

        rt = _runtime.get()
        abort = MPIAbort(errorcode, rt.me)
        if rt.aborted is None:
            rt.aborted = abort
        end_as_killed()
        failed_in_a_thread(abort)
        raise abort

    # -- everything else ------------------------------------------------------------------------
    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute(type(self).__name__, name)


class Intracomm(Comm):
    """An intra-communicator (every communicator but MPI.Intercomm's)."""

    def _init(self, comm: "Comm | None" = None) -> None:
        super()._init(comm)
        if self._state is not None and self._state.inter:
            raise TypeError("expecting an intracommunicator")


Comm._shrunk_class = Intracomm  # Shrink's result on every intracommunicator, as mpi4py's
_errhandlers.guard_calls(Comm)
COMM_NULL = Comm()
COMM_WORLD = Intracomm()
COMM_WORLD._fixed = "COMM_WORLD"
COMM_SELF = Intracomm()
COMM_SELF._fixed = "COMM_SELF"
_errhandlers.guard_calls(Datatype, lambda datatype: COMM_WORLD)
_errhandlers.guard_calls(Info, lambda info: COMM_WORLD)
_errhandlers.guard_calls(Op, lambda op: COMM_WORLD)
_errhandlers.guard_calls(Errhandler, lambda errhandler: COMM_WORLD)
Comm._handle_base = (Comm,)  # its handles compare with each other (``FreeableHandles``)
