"""Errors of the mpi4py stand-in, in one place.

    RuntimeError
    └── Exception           MPI.Exception: an MPI error class (ERR_TRUNCATE, ERR_RANK, ...)
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
ERR_NOT_SAME = 40
ERR_UNSUPPORTED_OPERATION = 52
ERR_LASTCODE = 92

ERROR_STRINGS = {
    SUCCESS: "MPI_SUCCESS: no errors",
    ERR_BUFFER: "MPI_ERR_BUFFER: invalid buffer pointer",
    ERR_COUNT: "MPI_ERR_COUNT: invalid count argument",
    ERR_TYPE: "MPI_ERR_TYPE: invalid datatype",
    ERR_TAG: "MPI_ERR_TAG: invalid tag",
    ERR_COMM: "MPI_ERR_COMM: invalid communicator",
    ERR_RANK: "MPI_ERR_RANK: invalid rank",
    ERR_REQUEST: "MPI_ERR_REQUEST: invalid request",
    ERR_ROOT: "MPI_ERR_ROOT: invalid root",
    ERR_GROUP: "MPI_ERR_GROUP: invalid group",
    ERR_OP: "MPI_ERR_OP: invalid reduce operation",
    ERR_TOPOLOGY: "MPI_ERR_TOPOLOGY: invalid communicator topology",
    ERR_DIMS: "MPI_ERR_DIMS: invalid topology dimension",
    ERR_ARG: "MPI_ERR_ARG: invalid argument of some other kind",
    ERR_UNKNOWN: "MPI_ERR_UNKNOWN: unknown error",
    ERR_TRUNCATE: "MPI_ERR_TRUNCATE: message truncated",
    ERR_OTHER: "MPI_ERR_OTHER: known error not in list",
    ERR_INTERN: "MPI_ERR_INTERN: internal error",
    ERR_IN_STATUS: "MPI_ERR_IN_STATUS: error code is in status",
    ERR_PENDING: "MPI_ERR_PENDING: pending request",
    ERR_NOT_SAME: "MPI_ERR_NOT_SAME: objects are not identical",
    ERR_UNSUPPORTED_OPERATION: "MPI_ERR_UNSUPPORTED_OPERATION: operation not supported",
}


def error_string(code: int) -> str:
    return ERROR_STRINGS.get(int(code), f"MPI error code {int(code)}")


class Exception(builtins.RuntimeError):  # noqa: A001 - mpi4py's name
    """``MPI.Exception``: an MPI error, with its error code.

    ``str(exc)`` is the error string (as mpi4py's), followed by what went
    wrong where the stand-in knows more.
    """

    def __init__(self, ierr: int = SUCCESS, detail: str = ""):
        self.ierr = int(ierr)
        self.detail = detail
        text = error_string(self.ierr)
        super().__init__(f"{text} ({detail})" if detail else text)

    def __reduce__(self):
        return type(self), (self.ierr, self.detail)

    def __int__(self):
        return self.ierr

    def __bool__(self):
        return self.ierr != SUCCESS

    def __hash__(self):
        return hash(self.ierr)

    def __eq__(self, other):
        return self.ierr == int(other) if isinstance(other, (int, Exception)) else NotImplemented

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other):
        return self.ierr < int(other)

    def __le__(self, other):
        return self.ierr <= int(other)

    def __gt__(self, other):
        return self.ierr > int(other)

    def __ge__(self, other):
        return self.ierr >= int(other)

    def Get_error_code(self) -> int:
        return self.ierr

    def Get_error_class(self) -> int:
        return self.ierr

    def Get_error_string(self) -> str:
        return error_string(self.ierr)

    error_code = property(Get_error_code)
    error_class = property(Get_error_class)
    error_string = property(Get_error_string)


MPIException = Exception


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
        name = frame.f_code.co_name
        frame = frame.f_back
    return name


def unsupported(call: str, instead: str) -> NotImplementedError:
    """The error for a call of mpi4py the stand-in does not implement."""
    return NotImplementedError(
        f"{call} is not supported by simdist's simulated MPI (the mpi4py stand-in of `simdist run`); {instead}"
    )
