"""Errors of the mpi4py stand-in, in one place.

    RuntimeError
    └── Exception           MPI.Exception: an MPI error class (ERR_TRUNCATE, ERR_RANK, ...)
    BaseException
    └── ErrorsAreFatal      an MPI error under MPI.ERRORS_ARE_FATAL or ERRORS_ABORT: ends the job
    NotImplementedError     a call of mpi4py that the stand-in does not have (see ``unsupported``)
    BaseException
    └── MPIAbort            Comm.Abort(code): ends the job; ``simdist run`` exits with ``code``

Error codes and strings are Open MPI's (the MPI that ``pip install -e
".[mpi]"`` brings), so a program that compares ``exc.Get_error_code()`` with
``MPI.ERR_TRUNCATE`` behaves as under ``mpiexec``. Errors that simdist
itself detects (mismatched collectives, hangs, bad arguments of a
collective, a communicator kept from an earlier run: ``earlier_run``) keep
simdist's own types: ``simdist.CollectiveMismatch``, ``simdist.InvalidType``,
``simdist.SimdistError``, ...
"""

from __future__ import annotations

import builtins
import sys

from simdist._errors import SimdistError

# Open MPI's error classes (mpi.h), and the strings MPI_Error_string gives.
SUCCESS = 0
ERR_BUFFER, ERR_COUNT, ERR_TYPE, ERR_TAG, ERR_COMM, ERR_RANK, ERR_REQUEST, ERR_ROOT = 1, 2, 3, 4, 5, 6, 7, 8
ERR_GROUP, ERR_OP, ERR_TOPOLOGY, ERR_DIMS, ERR_ARG, ERR_UNKNOWN, ERR_TRUNCATE, ERR_OTHER = 9, 10, 11, 12, 13, 14, 15, 16
ERR_INTERN, ERR_IN_STATUS, ERR_PENDING = 17, 18, 19
ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE, ERR_INFO, ERR_KEYVAL = 31, 32, 33, 34, 36
ERR_NOT_SAME, ERR_PORT, ERR_SPAWN = 40, 43, 50
ERR_UNSUPPORTED_OPERATION = 52
ERR_LASTCODE = 92

#: MPI_Error_string of Open MPI 5 for each error class it defines (0 to 79);
#: the codes from 80 to ERR_LASTCODE are valid but unused (class ERR_UNKNOWN).
ERROR_STRINGS = {
    0: 'MPI_SUCCESS: no errors',
    1: 'MPI_ERR_BUFFER: invalid buffer pointer',
    2: 'MPI_ERR_COUNT: invalid count argument',
    3: 'MPI_ERR_TYPE: invalid datatype',
    4: 'MPI_ERR_TAG: invalid tag',
    5: 'MPI_ERR_COMM: invalid communicator',
    6: 'MPI_ERR_RANK: invalid rank',
    7: 'MPI_ERR_REQUEST: invalid request',
    8: 'MPI_ERR_ROOT: invalid root',
    9: 'MPI_ERR_GROUP: invalid group',
    10: 'MPI_ERR_OP: invalid reduce operation',
    11: 'MPI_ERR_TOPOLOGY: invalid communicator topology',
    12: 'MPI_ERR_DIMS: invalid topology dimension',
    13: 'MPI_ERR_ARG: invalid argument of some other kind',
    14: 'MPI_ERR_UNKNOWN: unknown error',
    15: 'MPI_ERR_TRUNCATE: message truncated',
    16: 'MPI_ERR_OTHER: known error not in list',
    17: 'MPI_ERR_INTERN: internal error',
    18: 'MPI_ERR_IN_STATUS: error code in status',
    19: 'MPI_ERR_PENDING: pending request',
    20: 'MPI_ERR_ACCESS: invalid access mode',
    21: 'MPI_ERR_AMODE: invalid amode argument',
    22: 'MPI_ERR_ASSERT: invalid assert argument',
    23: 'MPI_ERR_BAD_FILE: bad file',
    24: 'MPI_ERR_BASE: invalid base',
    25: 'MPI_ERR_CONVERSION: error in data conversion',
    26: 'MPI_ERR_DISP: invalid displacement',
    27: 'MPI_ERR_DUP_DATAREP: error duplicating data representation',
    28: 'MPI_ERR_FILE_EXISTS: file exists already',
    29: 'MPI_ERR_FILE_IN_USE: file already in use',
    30: 'MPI_ERR_FILE: invalid file',
    31: 'MPI_ERR_INFO_KEY: invalid key argument for info object',
    32: 'MPI_ERR_INFO_NOKEY: unknown key for given info object',
    33: 'MPI_ERR_INFO_VALUE: invalid value argument for info object',
    34: 'MPI_ERR_INFO: invalid info object',
    35: 'MPI_ERR_IO: input/output error',
    36: 'MPI_ERR_KEYVAL: invalid key value',
    37: 'MPI_ERR_LOCKTYPE: invalid lock',
    38: 'MPI_ERR_NAME: invalid name argument',
    39: 'MPI_ERR_NO_MEM: out of memory',
    40: 'MPI_ERR_NOT_SAME: objects are not identical',
    41: 'MPI_ERR_NO_SPACE: no space left on device',
    42: 'MPI_ERR_NO_SUCH_FILE: no such file or directory',
    43: 'MPI_ERR_PORT: invalid port',
    44: 'MPI_ERR_QUOTA: out of quota',
    45: 'MPI_ERR_READ_ONLY: file is read only',
    46: 'MPI_ERR_RMA_CONFLICT: rma conflict during operation',
    47: 'MPI_ERR_RMA_SYNC: error executing rma sync',
    48: 'MPI_ERR_SERVICE: unknown service name',
    49: 'MPI_ERR_SIZE: invalid size',
    50: 'MPI_ERR_SPAWN: could not spawn processes',
    51: 'MPI_ERR_UNSUPPORTED_DATAREP: data representation not supported',
    52: 'MPI_ERR_UNSUPPORTED_OPERATION: operation not supported',
    53: 'MPI_ERR_WIN: invalid window',
    54: 'MPI_T_ERR_MEMORY: out of memory',
    55: 'MPI_T_ERR_NOT_INITIALIZED: interface not initialized',
    56: 'MPI_T_ERR_CANNOT_INIT: interface not in the state to be initialized',
    57: 'MPI_T_ERR_INVALID_INDEX: invalid index',
    58: 'MPI_T_ERR_INVALID_ITEM: the item index queried is out of range',
    59: 'MPI_T_ERR_INVALID_HANDLE: the handle is invalid',
    60: 'MPI_T_ERR_OUT_OF_HANDLES: no more handles available',
    61: 'MPI_T_ERR_OUT_OF_SESSIONS: no more sessions available',
    62: 'MPI_T_ERR_INVALID_SESSION: session argument is not a valid session',
    63: 'MPI_T_ERR_CVAR_SET_NOT_NOW: variable cannot be set at this moment',
    64: 'MPI_T_ERR_CVAR_SET_NEVER: variable cannot be set until end of execution',
    65: 'MPI_T_ERR_PVAR_NO_STARTSTOP: variable cannot be started or stopped',
    66: 'MPI_T_ERR_PVAR_NO_WRITE: variable cannot be written or reset',
    67: 'MPI_T_ERR_PVAR_NO_ATOMIC: variable cannot be read and written atomically',
    68: 'MPI_ERR_RMA_RANGE: invalid RMA address range',
    69: 'MPI_ERR_RMA_ATTACH: Could not attach RMA segment',
    70: 'MPI_ERR_RMA_FLAVOR: Invalid type of window',
    71: 'MPI_ERR_RMA_SHARED: Memory cannot be shared',
    72: 'MPI_T_ERR_INVALID: Invalid use of the interface or bad parameter value(s)',
    73: 'MPI_T_ERR_INVALID_NAME: The variable or category name is invalid',
    74: 'MPI_ERR_PROC_ABORTED: operation failed because a remote peer has aborted',
    75: 'MPI_ERR_PROC_FAILED: Process Failure',
    76: 'MPI_ERR_PROC_FAILED_PENDING: Process Failure during an MPI_ANY_SOURCE non-blocking receive, request is still active',
    77: 'MPI_ERR_REVOKED: Communication Object Revoked',
    78: 'MPI_ERR_SESSION: Invalid session handle',
    79: 'MPI_ERR_VALUE_TOO_LARGE: Value is too large to store',
}
_UNUSED = "Unknown error (this should not happen!)"


# The error classes and codes the program added (MPI_Add_error_class, ...):
# code -> its class (a class is its own), and the strings given to them.
_USER_CLASS_OF: dict[int, int] = {}
_USER_STRINGS: dict[int, str] = {}


def _checked(code) -> int:
    code = int(code)
    if not SUCCESS <= code <= ERR_LASTCODE and code not in _USER_CLASS_OF:
        raise Exception(ERR_ARG, f"{code} is not an MPI error code (0 to MPI.ERR_LASTCODE, {ERR_LASTCODE}, "
                        "or one of MPI.Add_error_class/Add_error_code)")
    return code


def error_string(code: int) -> str:
    """MPI_Error_string, as Open MPI gives it; MPI.Exception(ERR_ARG) for a
    value that is no error code."""
    code = _checked(code)
    if code in _USER_CLASS_OF:
        return _USER_STRINGS.get(code, "")
    return ERROR_STRINGS.get(code, _UNUSED)


def error_class(code: int) -> int:
    """MPI_Error_class: every predefined code is its own class; an added
    code's is the class it was added to."""
    code = _checked(code)
    if code in _USER_CLASS_OF:
        return _USER_CLASS_OF[code]
    return code if code in ERROR_STRINGS else ERR_UNKNOWN


def last_used_code() -> int:
    """The MPI.LASTUSEDCODE attribute: the largest code or class in use."""
    return max(_USER_CLASS_OF, default=ERR_LASTCODE)


def add_error_class() -> int:
    """MPI_Add_error_class: a new class, with no string yet."""
    code = last_used_code() + 1
    _USER_CLASS_OF[code] = code
    return code


def add_error_code(errorclass: int) -> int:
    """MPI_Add_error_code: a new code of an error class (predefined or added)."""
    errorclass = int(errorclass)
    if _USER_CLASS_OF.get(errorclass) != errorclass and errorclass not in ERROR_STRINGS:
        raise Exception(ERR_ARG, f"Add_error_code({errorclass}): not an error class")
    code = last_used_code() + 1
    _USER_CLASS_OF[code] = errorclass
    return code


def add_error_string(errorcode: int, string: str) -> None:
    """MPI_Add_error_string: the string of a code or class the program added."""
    errorcode = int(errorcode)
    if errorcode not in _USER_CLASS_OF:
        raise Exception(ERR_ARG, f"Add_error_string({errorcode}): only the codes and classes of "
                        "MPI.Add_error_class/Add_error_code take a string")
    _USER_STRINGS[errorcode] = str(string)


class Exception(builtins.RuntimeError):  # noqa: A001 - mpi4py's name
    """``MPI.Exception``: an MPI error, with its error code.

    As mpi4py's: ``args`` is ``(code,)``, ``repr`` is ``MPI.Exception(6)``,
    ``str`` the error string (``MPI_ERR_RANK: invalid rank``). What went
    wrong where (the call, the value) is ``detail``, which tracebacks show
    as a note (Python 3.11 and later).
    """

    def __init__(self, ierr: int = SUCCESS, detail: str = ""):
        ierr = int(ierr)
        super().__init__(ERR_UNKNOWN if ierr < SUCCESS else ierr)
        self.detail = detail
        if detail:
            self.__notes__ = [detail]

    def __reduce__(self):
        return type(self), (self.ierr, self.detail)

    @property
    def ierr(self) -> int:
        return self.args[0]

    def __repr__(self):
        return f"MPI.Exception({self.ierr})"

    def __str__(self):
        return self.Get_error_string()

    def __int__(self):
        return self.ierr

    def __bool__(self):
        return self.ierr != SUCCESS

    def __hash__(self):
        return hash(self.ierr)

    def __eq__(self, other):
        return self.ierr == other

    def __ne__(self, other):
        return self.ierr != other

    def __lt__(self, other):
        return self.ierr < other

    def __le__(self, other):
        return self.ierr <= other

    def __gt__(self, other):
        return self.ierr > other

    def __ge__(self, other):
        return self.ierr >= other

    def Get_error_code(self) -> int:
        return self.ierr

    def Get_error_class(self) -> int:
        return error_class(self.ierr)

    def Get_error_string(self) -> str:
        return error_string(self.ierr)

    error_code = property(Get_error_code)
    error_class = property(Get_error_class)
    error_string = property(Get_error_string)


MPIException = Exception


class ErrorsAreFatal(BaseException):
    """An MPI error on a communicator whose error handler is
    ``MPI.ERRORS_ARE_FATAL`` or ``MPI.ERRORS_ABORT``: as under MPI, it ends
    the job. A BaseException, so that the program cannot catch it as an
    ``MPI.Exception``; ``simdist run`` fails with the rank's traceback.
    ``error`` is the MPI.Exception the call raised."""

    def __init__(self, error: "Exception", call: str, where: str, handler: str):
        self.error, self.call, self.where, self.handler = error, call, where, handler
        detail = f" ({error.detail})" if error.detail else ""
        super().__init__(f"an error occurred in {call} on {where}: {error}{detail}; under {handler} the job ends")

    def __reduce__(self):
        return type(self), (self.error, self.call, self.where, self.handler)


class MPIAbort(BaseException):
    """``Comm.Abort(code)`` was called on world rank ``rank``.

    A BaseException, so that ``except Exception`` in the program does not
    swallow it (MPI_Abort cannot be caught either). ``simdist run`` ends
    with exit status ``code`` and the message ``MPI_Abort(code) on rank r``.
    """

    def __init__(self, code: int, rank: int):
        self.code = int(code)
        self.rank = int(rank)
        super().__init__(f"MPI_Abort({self.code}) on rank {self.rank}")

    def __reduce__(self):
        return type(self), (self.code, self.rank)


def earlier_run(rank: int, what: str) -> SimdistError:
    """The error of a call on ``what`` (a communicator, request or message)
    that an ended run made: the stand-in's objects last only for their run."""
    return SimdistError(
        f"rank {rank}: {_calling_method()} on {what} of an earlier run of the mpi4py stand-in; communicators, "
        "requests and messages last only as long as the run that made them (the program under `simdist run`, "
        "or one `installed()` block): make them again in this run"
    )


def _calling_method() -> str:
    """The stand-in's method the program called: the outermost caller of
    ``earlier_run`` in this package (``allreduce``, not the ``allgather``
    it calls)."""
    frame, name = sys._getframe(2), "a call"
    while frame is not None and frame.f_globals.get("__package__") == __package__:
        if not frame.f_globals["__name__"].endswith("._errhandlers"):  # not the error handlers' wrapper
            name = frame.f_code.co_name
        frame = frame.f_back
    return name


def unsupported(call: str, instead: str) -> NotImplementedError:
    """The error for a call of mpi4py the stand-in does not implement."""
    return NotImplementedError(
        f"{call} is not supported by simdist's simulated MPI (the mpi4py stand-in of `simdist run`); {instead}"
    )
