"""What the stand-in does not have, and the NotImplementedError for each.

``CONSTANTS`` holds every integer constant of mpi4py 4.1 with Open MPI's
values (the error classes, keyvals, modes, ...), so that a program may name
any of them. The calls and classes mpi4py has and the stand-in does not are
listed here with what to use instead; ``unsupported_attribute`` and
``unsupported_module_attribute`` raise NotImplementedError for them, and the
usual AttributeError for names mpi4py does not have either.
"""

from __future__ import annotations

from ._errors import unsupported

#: mpi4py's integer constants, as Open MPI defines them.
CONSTANTS = {'UNDEFINED': -32766,
 'ANY_SOURCE': -1,
 'ANY_TAG': -1,
 'PROC_NULL': -2,
 'ROOT': -4,
 'KEYVAL_INVALID': -1,
 'TAG_UB': 0,
 'IO': 2,
 'WTIME_IS_GLOBAL': 3,
 'UNIVERSE_SIZE': 6,
 'APPNUM': 4,
 'LASTUSEDCODE': 5,
 'WIN_BASE': 7,
 'WIN_SIZE': 8,
 'WIN_DISP_UNIT': 9,
 'WIN_CREATE_FLAVOR': 10,
 'WIN_FLAVOR': 10,
 'WIN_MODEL': 11,
 'SUCCESS': 0,
 'ERR_LASTCODE': 92,
 'ERR_ABI': 92,
 'ERR_TYPE': 3,
 'ERR_REQUEST': 7,
 'ERR_OP': 10,
 'ERR_GROUP': 9,
 'ERR_INFO': 34,
 'ERR_ERRHANDLER': 92,
 'ERR_SESSION': 78,
 'ERR_COMM': 5,
 'ERR_WIN': 53,
 'ERR_FILE': 30,
 'ERR_BUFFER': 1,
 'ERR_COUNT': 2,
 'ERR_TAG': 4,
 'ERR_RANK': 6,
 'ERR_ROOT': 8,
 'ERR_TRUNCATE': 15,
 'ERR_IN_STATUS': 18,
 'ERR_PENDING': 19,
 'ERR_TOPOLOGY': 11,
 'ERR_DIMS': 12,
 'ERR_ARG': 13,
 'ERR_OTHER': 16,
 'ERR_UNKNOWN': 14,
 'ERR_INTERN': 17,
 'ERR_KEYVAL': 36,
 'ERR_NO_MEM': 39,
 'ERR_INFO_KEY': 31,
 'ERR_INFO_VALUE': 33,
 'ERR_INFO_NOKEY': 32,
 'ERR_SPAWN': 50,
 'ERR_PORT': 43,
 'ERR_SERVICE': 48,
 'ERR_NAME': 38,
 'ERR_PROC_ABORTED': 74,
 'ERR_BASE': 24,
 'ERR_SIZE': 49,
 'ERR_DISP': 26,
 'ERR_ASSERT': 22,
 'ERR_LOCKTYPE': 37,
 'ERR_RMA_CONFLICT': 46,
 'ERR_RMA_SYNC': 47,
 'ERR_RMA_RANGE': 68,
 'ERR_RMA_ATTACH': 69,
 'ERR_RMA_SHARED': 71,
 'ERR_RMA_FLAVOR': 70,
 'ERR_BAD_FILE': 23,
 'ERR_NO_SUCH_FILE': 42,
 'ERR_FILE_EXISTS': 28,
 'ERR_FILE_IN_USE': 29,
 'ERR_AMODE': 21,
 'ERR_ACCESS': 20,
 'ERR_READ_ONLY': 45,
 'ERR_NO_SPACE': 41,
 'ERR_QUOTA': 44,
 'ERR_NOT_SAME': 40,
 'ERR_IO': 35,
 'ERR_UNSUPPORTED_OPERATION': 52,
 'ERR_UNSUPPORTED_DATAREP': 51,
 'ERR_CONVERSION': 25,
 'ERR_DUP_DATAREP': 27,
 'ERR_VALUE_TOO_LARGE': 79,
 'ERR_REVOKED': 77,
 'ERR_PROC_FAILED': 75,
 'ERR_PROC_FAILED_PENDING': 76,
 'ORDER_C': 0,
 'ORDER_FORTRAN': 1,
 'ORDER_F': 1,
 'TYPECLASS_LOGICAL': 4,
 'TYPECLASS_INTEGER': 1,
 'TYPECLASS_REAL': 2,
 'TYPECLASS_COMPLEX': 3,
 'DISTRIBUTE_NONE': 2,
 'DISTRIBUTE_BLOCK': 0,
 'DISTRIBUTE_CYCLIC': 1,
 'DISTRIBUTE_DFLT_DARG': -1,
 'COMBINER_NAMED': 0,
 'COMBINER_DUP': 1,
 'COMBINER_CONTIGUOUS': 2,
 'COMBINER_VECTOR': 3,
 'COMBINER_HVECTOR': 5,
 'COMBINER_INDEXED': 6,
 'COMBINER_HINDEXED': 8,
 'COMBINER_INDEXED_BLOCK': 9,
 'COMBINER_HINDEXED_BLOCK': 18,
 'COMBINER_STRUCT': 11,
 'COMBINER_SUBARRAY': 12,
 'COMBINER_DARRAY': 13,
 'COMBINER_RESIZED': 17,
 'COMBINER_VALUE_INDEX': 0,
 'COMBINER_F90_INTEGER': 16,
 'COMBINER_F90_REAL': 14,
 'COMBINER_F90_COMPLEX': 15,
 'F_SOURCE': 0,
 'F_TAG': 1,
 'F_ERROR': 2,
 'F_STATUS_SIZE': 6,
 'IDENT': 0,
 'CONGRUENT': 1,
 'SIMILAR': 2,
 'UNEQUAL': 3,
 'CART': 1,
 'GRAPH': 2,
 'DIST_GRAPH': 3,
 'UNWEIGHTED': 2,
 'WEIGHTS_EMPTY': 3,
 'COMM_TYPE_SHARED': 0,
 'COMM_TYPE_HW_GUIDED': 13,
 'COMM_TYPE_HW_UNGUIDED': 12,
 'COMM_TYPE_RESOURCE_GUIDED': -32766,
 'BSEND_OVERHEAD': 128,
 'WIN_FLAVOR_CREATE': 1,
 'WIN_FLAVOR_ALLOCATE': 2,
 'WIN_FLAVOR_DYNAMIC': 3,
 'WIN_FLAVOR_SHARED': 4,
 'WIN_SEPARATE': 1,
 'WIN_UNIFIED': 0,
 'MODE_NOCHECK': 1,
 'MODE_NOSTORE': 8,
 'MODE_NOPUT': 4,
 'MODE_NOPRECEDE': 2,
 'MODE_NOSUCCEED': 16,
 'LOCK_EXCLUSIVE': 1,
 'LOCK_SHARED': 2,
 'MODE_RDONLY': 2,
 'MODE_WRONLY': 4,
 'MODE_RDWR': 8,
 'MODE_CREATE': 1,
 'MODE_EXCL': 64,
 'MODE_DELETE_ON_CLOSE': 16,
 'MODE_UNIQUE_OPEN': 32,
 'MODE_SEQUENTIAL': 256,
 'MODE_APPEND': 128,
 'SEEK_SET': 600,
 'SEEK_CUR': 602,
 'SEEK_END': 604,
 'DISPLACEMENT_CURRENT': -54278278,
 'DISP_CUR': -54278278,
 'THREAD_SINGLE': 0,
 'THREAD_FUNNELED': 1,
 'THREAD_SERIALIZED': 2,
 'THREAD_MULTIPLE': 3,
 'VERSION': 3,
 'SUBVERSION': 1,
 'MAX_PROCESSOR_NAME': 256,
 'MAX_ERROR_STRING': 256,
 'MAX_PORT_NAME': 1024,
 'MAX_INFO_KEY': 36,
 'MAX_INFO_VAL': 256,
 'MAX_OBJECT_NAME': 64,
 'MAX_DATAREP_STRING': 128,
 'MAX_LIBRARY_VERSION_STRING': 256,
 'MAX_PSET_NAME_LEN': 512,
 'MAX_STRINGTAG_LEN': 1024}

_HANDLES = "the simulated MPI has no C or Fortran handles"
_REVOKE = ("revoking a communicator is not simulated: a rank waiting in a shared-memory collective cannot be "
           "woken out of it; no process fails alone in a simulated run, and Agree, Shrink, Get_failed and "
           "Ack_failed work without a revoke")


def _comm_hint(name: str) -> str | None:
    if name in ("Attach_buffer", "Detach_buffer", "Flush_buffer", "Iflush_buffer"):
        return "a communicator's own buffer (MPI 4.1) is not simulated; attach one for the process with MPI.Attach_buffer"
    if name == "Revoke":
        return _REVOKE
    if name in ("fromhandle", "handle"):
        return _HANDLES
    return None


_CLASS_HINTS = {
    "Request": {"Get_status_all": "use Request.Testall", "Get_status_any": "use Request.Testany",
                "Get_status_some": "use Request.Testsome", "get_status_all": "use Request.testall",
                "get_status_any": "use Request.testany", "get_status_some": "use Request.testsome"},
}
_HANDLE_NAMES = ("py2f", "f2py", "toint", "fromint", "fromhandle", "handle", "tomemory")

_MODULE_HINTS = {
    "Register_datarep": "user data representations of MPI-IO are not simulated ('native' and 'internal' are)",
    "Iflush_buffer": "the nonblocking flush of the attached buffer is not simulated; use MPI.Flush_buffer",
    "Alloc_mem": "use numpy.empty (or bytearray)", "Free_mem": "use numpy.empty (or bytearray)",
    "Remove_error_class": "user error classes are not simulated",
    "Remove_error_code": "user error codes are not simulated",
    "Remove_error_string": "user error strings are not simulated",
    "Get_hw_resource_info": "the simulated MPI has no hardware information",
}


def _refusal(call: str, hint: str) -> NotImplementedError:
    """The refusal of ``call``."""
    error = unsupported(call, hint)
    return error


def unsupported_attribute(cls: str, name: str) -> Exception:
    """NotImplementedError for a known mpi4py name of ``cls`` the stand-in
    lacks, else the AttributeError Python would raise."""
    hint = None
    if not name.startswith("_"):
        if cls in ("Comm", "Intracomm", "Intercomm", "Topocomm", "Cartcomm", "Graphcomm", "Distgraphcomm"):
            hint = _comm_hint(name)
        elif name in _HANDLE_NAMES:
            hint = _HANDLES
        else:
            hint = _CLASS_HINTS.get(cls, {}).get(name)
    if hint is None:
        return AttributeError(f"'{cls}' object has no attribute {name!r}")
    return _refusal(f"{cls}.{name}", hint)


def unsupported_module_attribute(name: str) -> Exception:
    """The same for the module ``mpi4py.MPI``."""
    if name in _MODULE_HINTS:
        return _refusal(f"MPI.{name}", _MODULE_HINTS[name])
    if name.startswith("_") and not name.startswith("__"):
        return unsupported(f"MPI.{name}", "mpi4py's internals are not simulated")
    return AttributeError(f"module 'mpi4py.MPI' has no attribute {name!r}")
