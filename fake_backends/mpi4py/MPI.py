"""``mpi4py.MPI`` for ``simdist run``: a simulated MPI on the simulator's ranks.

The names, argument orders, constants and error codes are mpi4py's (4.x,
with Open MPI's constant values), so that unmodified mpi4py programs run:
``COMM_WORLD`` and ``COMM_SELF``, Dup/Split/Free, the point-to-point calls
of both APIs (buffers and pickled objects) with Status, ANY_SOURCE,
ANY_TAG and PROC_NULL, requests, probes, the blocking collectives of both
APIs with IN_PLACE, the predefined ops and user ops, the predefined
datatypes, Wtime, Abort and friends.

What is different, on purpose:

* Results are deterministic: every reduction, of buffers or of objects, is
  the rank-order fold (mpi4py may reduce objects along a tree; MPI
  libraries pick their own order for buffers). Only which message an
  ANY_SOURCE receive matches, when several are ready, depends on timing.
* Mismatched collectives raise ``simdist.CollectiveMismatch`` on every rank;
  a hang ends at ``simdist run``'s timeout with a report of where each rank
  waits (a rank in a point-to-point call shows as the MPI call it is in,
  e.g. "waiting in Recv(source=1, tag=0) at prog.py:11, on rank 1"); a
  deadlock is reported at once with its cycle; a rank's exception fails
  the run with its traceback.
* Messages above 64 KiB (less on worlds of more than 15 ranks) and every
  Ssend are sent by rendezvous, as Open MPI does: two ranks that both Send
  a large message before receiving hang, and are reported. Point-to-point
  messages move while a rank is in any call of this module, a blocking
  collective included (see ``fake_backends.mpi4py._p2p``).
* ``irecv`` has no size limit (mpi4py's default buffer is 32 KiB).
* Anything mpi4py has and this module does not (dynamic windows, dynamic
  processes, ...) raises ``NotImplementedError`` naming the call
  and what to use instead; names mpi4py does not have either raise
  AttributeError. Errors raise ``MPI.Exception`` under a communicator's
  default handler, ERRORS_RETURN, and end the job under ERRORS_ARE_FATAL
  and ERRORS_ABORT (``_errhandlers``); the thread level is
  THREAD_SERIALIZED (one thread at a time may call MPI).
"""

from __future__ import annotations

# Names, not modules: mpi4py's MPI module holds no module object, and its
# tests walk the module's classes and submodules (a module would lead them
# round the standard library's cycles of imports).
from math import prod as _prod
from socket import gethostname as _gethostname
from time import get_clock_info as _get_clock_info
from time import perf_counter as _perf_counter

from ._abi import Get_abi_fortran_info, Get_abi_info, Get_abi_version
from ._dynproc import Close_port, Open_port
from ._dynproc import accept as _accept
from ._dynproc import connect as _connect
from ._dynproc import join as _join
from ._spawn import get_parent as _get_parent, spawn as _spawn, spawn_multiple as _spawn_multiple
from ._nameservice import Lookup_name, Publish_name, Unpublish_name
from ._buffered import BSEND_OVERHEAD, Alloc_mem, Attach_buffer, Detach_buffer, Flush_buffer, Free_mem
from ._buffers import (BOTTOM, BUFFER_AUTOMATIC, IN_PLACE, Aint_add, Aint_diff, BottomType, BufferAutomaticType,
                       Get_address, InPlaceType)
from ._commctx import _commctx_inter, _commctx_intra
from ._comm import (APPNUM, COMM_NULL, COMM_SELF, COMM_TYPE_SHARED, COMM_WORLD, CONGRUENT, IDENT, IO,
                    KEYVAL_INVALID, LASTUSEDCODE, SIMILAR, UNDEFINED, UNEQUAL, UNIVERSE_SIZE, WTIME_IS_GLOBAL, Comm,
                    Intracomm)
from ._comm import TAG_UB_KEY as TAG_UB
from ._datatypes import TYPES as _TYPES
from ._datatypes import Datatype, _typedict, _typedict_c, _typedict_f
from ._typecodes import _typealign, _typecode
from ._chandles import _addressof, _handleof, _sizeof
from ._errors import (ERR_ARG, ERR_BUFFER, ERR_COMM, ERR_COUNT, ERR_DIMS, ERR_GROUP, ERR_IN_STATUS, ERR_INTERN,
                      ERR_LASTCODE, ERR_NOT_SAME, ERR_OP, ERR_OTHER, ERR_PENDING, ERR_RANK, ERR_REQUEST, ERR_ROOT,
                      ERR_TAG, ERR_TOPOLOGY, ERR_TRUNCATE, ERR_TYPE, ERR_UNKNOWN, ERR_UNSUPPORTED_OPERATION, SUCCESS,
                      Exception, MPIAbort)
from ._errors import add_error_class as _add_error_class
from ._errors import add_error_code as _add_error_code
from ._errors import add_error_string as _add_error_string
from ._errors import error_class as _error_class
from ._errors import error_string as _error_string
from ._groups import GROUP_EMPTY, GROUP_NULL, Group
from ._handles import register as _register_handles
from ._intercomm import CREATE_INTERCOMM as _CREATE_INTERCOMM
from ._intercomm import Intercomm
from ._hints import ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, INFO_ENV, INFO_NULL, Errhandler, Info
from ._locks import _comm_lock, _comm_lock_table
from ._mpibuffer import buffer, memory
from ._ops import OP_NULL, Op
from ._ops import PREDEFINED as _PREDEFINED
from ._file import FILE_NULL, File
from ._grequests import Grequest
from ._p2p import ANY_SOURCE, ANY_TAG, PROC_NULL
from ._pickle import Pickle, pickle
from ._names import CONSTANTS as _CONSTANTS
from ._pack import METHODS as _PACK_METHODS
from ._messages import MESSAGE_NO_PROC, MESSAGE_NULL, Message
from ._requests import REQUEST_NULL, Prequest, Request
from ._status import Status
from ._runtime import get as _runtime_get
from ._sessions import SESSION_NULL, Session
from ._sessions import create_from_group as _create_from_group
from ._sessions import create_from_session_pset as _create_from_session_pset
from ._topologies import CONSTRUCTORS as _TOPOLOGY_CONSTRUCTORS
from ._topologies import Cartcomm, Distgraphcomm, Graphcomm, Topocomm
from ._win import WIN_NULL, Win

globals().update({k: v for k, v in _CONSTANTS.items() if k not in globals()})  # every int constant of mpi4py
globals().update(_TYPES)  # MPI.INT, MPI.DOUBLE, ... (MPI.DATATYPE_NULL included)
for _name, _method in _PACK_METHODS.items():  # Datatype.Pack, ...: see the module that defines them
    setattr(Datatype, _name, _method)
for _name, _method in _TOPOLOGY_CONSTRUCTORS.items():  # Intracomm.Create_cart, ...: see the module that defines them
    setattr(Intracomm, _name, _method)
del _name, _method
Intracomm.Create_intercomm = _CREATE_INTERCOMM
Intracomm.Accept, Intracomm.Connect, Comm.Join = _accept, _connect, classmethod(_join)
Intracomm.Spawn, Intracomm.Spawn_multiple, Comm.Get_parent = _spawn, _spawn_multiple, classmethod(_get_parent)
Intracomm.Create_from_group = classmethod(_create_from_group)
Group.Create_from_session_pset = classmethod(_create_from_session_pset)
globals().update(_PREDEFINED)  # MPI.SUM, MPI.MAX, ..., MPI.MAXLOC, MPI.REPLACE, MPI.NO_OP

ROOT = -4
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
VERSION, SUBVERSION = 3, 1
MAX_PROCESSOR_NAME = MAX_ERROR_STRING = MAX_LIBRARY_VERSION_STRING = MAX_PORT_NAME = 256
MAX_OBJECT_NAME, MAX_INFO_KEY, MAX_INFO_VAL, MAX_DATAREP_STRING = 64, 36, 256, 128
CART, GRAPH, DIST_GRAPH = 1, 2, 3
ORDER_C, ORDER_FORTRAN, ORDER_F = 0, 1, 1



# -- the environment ------------------------------------------------------------
def Init() -> None:
    """Nothing to do: the simulated MPI is initialized when the program starts."""
    _runtime_get()


def Init_thread(required: int = THREAD_MULTIPLE) -> int:
    _runtime_get()
    return min(required, THREAD_SERIALIZED)


def Query_thread() -> int:
    """THREAD_SERIALIZED: threads may call MPI, one at a time."""
    return THREAD_SERIALIZED


def _set_abort_status(status: int) -> None:
    """mpi4py's hook for ``mpi4py.run``: a failing program ends the job with
    ``status``. Its exception (or SystemExit) ends the rank, and the run,
    here already."""


def Is_thread_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def Finalize() -> None:
    """Hand over every queued message; no MPI call may follow."""
    rt = _runtime_get()
    if not rt.finalized:
        rt.engine.flush()
        from ._misuse import at_end

        at_end(rt)  # what --check finds left at Finalize
        rt.finalized = True


def _current_runtime():
    from . import _runtime

    return _runtime.current


def Is_initialized() -> bool:
    return _current_runtime() is not None


def Is_finalized() -> bool:
    rt = _current_runtime()
    return rt is not None and rt.finalized


def Get_version() -> tuple[int, int]:
    return VERSION, SUBVERSION


def Get_library_version() -> str:
    import simdist

    rt = _current_runtime()
    ranks = f" on {rt.world.size} ranks" if rt is not None else ""
    return (f"simdist {simdist.__version__} simulated MPI (the mpi4py stand-in of `simdist run`){ranks}: "
            "ranks are processes on one machine with shared-memory collectives, not an MPI library")


def get_vendor() -> tuple[str, tuple[int, int, int]]:
    return "simdist", (0, 1, 0)


def Get_processor_name() -> str:
    return _gethostname()


_START = _perf_counter()


def Wtime() -> float:
    """Seconds of wall-clock time from an arbitrary origin."""
    return _perf_counter() - _START


def Wtick() -> float:
    return _get_clock_info("perf_counter").resolution


def Pcontrol(level: int) -> None:
    pass


def Get_error_string(errorcode: int) -> str:
    return _error_string(errorcode)


def Get_error_class(errorcode: int) -> int:
    return _error_class(errorcode)


def Add_error_class() -> int:
    return _add_error_class()


def Add_error_code(errorclass: int) -> int:
    return _add_error_code(errorclass)


def Add_error_string(errorcode: int, string: str) -> None:
    _add_error_string(errorcode, string)


def Compute_dims(nnodes: int, dims) -> list[int]:
    """MPI_Dims_create: split ``nnodes`` into ``len(dims)`` factors as equal
    as possible (non-increasing), keeping the non-zero entries of ``dims``."""
    dims = [0] * dims if isinstance(dims, int) else [int(d) for d in dims]
    fixed = _prod(d for d in dims if d > 0)
    free = [i for i, d in enumerate(dims) if d == 0]
    if any(d < 0 for d in dims) or fixed == 0 or nnodes % fixed:
        raise Exception(ERR_DIMS, f"Compute_dims({nnodes}, {dims}): cannot split {nnodes} over fixed dims")
    rest, factors, p = nnodes // fixed, [], 2
    if not free:
        if rest != 1:
            raise Exception(ERR_DIMS, f"Compute_dims({nnodes}, {dims}): the dims multiply to {fixed}")
        return dims
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    sizes = [1] * len(free)
    for f in sorted(factors, reverse=True):
        sizes[sizes.index(min(sizes))] *= f
    for i, s in zip(free, sorted(sizes, reverse=True)):
        dims[i] = s
    return dims


def __getattr__(name: str):
    from ._names import unsupported_module_attribute

    raise unsupported_module_attribute(name)


_register_handles(globals(), null_or_refused=(Comm, Intracomm, Intercomm, Topocomm, Cartcomm, Graphcomm, Distgraphcomm,
                                              Group, Request, Prequest, Grequest, Message, File, Session, Win),
                  same_handle=(Errhandler, Datatype, Op), info=(Info,))

#: The names this module gives, each one of mpi4py.MPI's (a test compares them with mpi4py's).
__all__ = sorted(
    name for name in globals()
    if name.isidentifier() and not name.startswith("_")
    and name not in ("annotations", "MPIAbort")
) + ["_typedict", "_typedict_c", "_typedict_f"]
