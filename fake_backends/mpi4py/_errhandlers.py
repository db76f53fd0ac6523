"""The error handler of a communicator, applied to the errors of its calls.

Every communicator starts with ``MPI.ERRORS_RETURN``, as under mpi4py
(which sets it on COMM_WORLD, COMM_SELF and each communicator it makes):
an error raises ``MPI.Exception``, which the program may catch. Under
``MPI.ERRORS_ARE_FATAL`` or ``MPI.ERRORS_ABORT`` (``Comm.Set_errhandler``)
an error in a call on that communicator ends the job instead: the call
raises ``ErrorsAreFatal``, a BaseException the program does not catch as
an MPI.Exception, and ``simdist run`` fails with the rank's traceback (Open
MPI prints its report and ends every process). Under a user handler
(``Comm.Create_errhandler(function)``) the function is called with the
communicator and the error code, then the call raises MPI.Exception, as
mpi4py does when the handler returns. ``guard_calls`` wraps the public
calls of the communicator class so. The errors of calls on no
communicator (of datatypes, infos, ops and error handlers) go through
MPI.COMM_WORLD's handler, as under Open MPI 5.
"""

from __future__ import annotations

import functools
import inspect
import threading

from ._errors import ERR_ARG, ErrorsAreFatal
from ._errors import Exception as MPIException
from ._hints import ERRORS_RETURN, Errhandler

_ENDS_THE_JOB = ("MPI_ERRORS_ARE_FATAL", "MPI_ERRORS_ABORT")


def default() -> Errhandler:
    """The handler of a new communicator: MPI.ERRORS_RETURN (mpi4py's policy)."""
    return Errhandler(ERRORS_RETURN)


def checked(errhandler, call: str) -> Errhandler:
    """A handle on ``errhandler`` to keep, or the error of ``Set_errhandler`` with no handler."""
    if not isinstance(errhandler, Errhandler):
        raise TypeError(f"{call}: expected an MPI.Errhandler such as MPI.ERRORS_RETURN, got "
                        f"{type(errhandler).__name__}")
    if not errhandler:
        raise MPIException(ERR_ARG, f"{call}(MPI.ERRHANDLER_NULL): pass MPI.ERRORS_RETURN, "
                           "MPI.ERRORS_ARE_FATAL, MPI.ERRORS_ABORT or one of Comm.Create_errhandler")
    return Errhandler(errhandler)


def invoke(comm, st, error: MPIException, call: str) -> None:
    """Apply the communicator's handler to ``error``: end the job (fatal
    handlers), call the user's function, or nothing (ERRORS_RETURN); the
    caller then raises ``error``."""
    handler = st.errhandler
    if handler._name in _ENDS_THE_JOB:
        raise ErrorsAreFatal(error, call, st.name, handler._name) from None  # the message says it all
    if handler._function is not None:
        handler._function(comm, error.Get_error_code())


_calls = threading.local()  # how deep this thread is in guarded calls


def _guarded(method, call: str, owner):
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        depth = getattr(_calls, "depth", 0)
        _calls.depth = depth + 1
        try:
            return method(self, *args, **kwargs)
        except MPIException as exc:
            if depth == 0:  # the program's call, not one the stand-in makes inside it
                comm = owner(self)
                st = comm._live()
                if st is not None:
                    invoke(comm, st, exc, call)
            raise
        finally:
            _calls.depth = depth

    return guarded


def guard_calls(cls, owner=lambda comm: comm) -> None:
    """Wrap every public method of ``cls`` (its mixins' included) so that its
    MPI errors go through the error handler of ``owner(obj)``: a
    communicator's own, or, for objects of no communicator (datatypes,
    infos, ops, error handlers), MPI.COMM_WORLD's, as under Open MPI."""
    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        if not name.startswith("_") and inspect.isfunction(method):  # not static or class methods
            setattr(cls, name, _guarded(method, f"{cls.__name__}.{name}", owner))
