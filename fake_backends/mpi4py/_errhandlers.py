"""The error handler of a communicator, applied to the errors of its calls.

Every communicator starts with ``MPI.ERRORS_RETURN``, as under mpi4py
(which sets it on COMM_WORLD, COMM_SELF and each communicator it makes):
an error raises ``MPI.Exception``, which the program may catch.
``mpi4py.rc.errors`` (or ``MPI4PY_RC_ERRORS``) chooses another, as in
mpi4py: ``"fatal"`` and ``"abort"`` set ``MPI.ERRORS_ARE_FATAL`` and
``MPI.ERRORS_ABORT``, ``"default"`` sets none (MPI's own: the predefined
communicators' ``MPI.ERRORS_ARE_FATAL``, inherited by those made from them). Under
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
import os
import threading
import warnings

from ._errors import ERR_ARG, ErrorsAreFatal
from ._errors import Exception as MPIException
from ._hints import ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler

_ENDS_THE_JOB = ("MPI_ERRORS_ARE_FATAL", "MPI_ERRORS_ABORT")
_OF_RC = {"exception": ERRORS_RETURN, "abort": ERRORS_ABORT, "fatal": ERRORS_ARE_FATAL}


def _rc_errors() -> str:
    """``mpi4py.rc.errors``, where ``MPI4PY_RC_ERRORS`` overrides it (as in mpi4py)."""
    from . import rc

    option = os.environ.get("MPI4PY_RC_ERRORS", rc.errors)
    if option != "default" and option not in _OF_RC:
        warnings.warn(f"mpi4py.rc.errors: unexpected value {option!r}", RuntimeWarning, stacklevel=2)
    return option


def default(parent: Errhandler | None = None) -> Errhandler:
    """The handler of a new communicator (of ``parent``'s handler if it is
    made from another): the one ``mpi4py.rc.errors`` names, MPI.ERRORS_RETURN
    by default; under ``"default"`` the parent's, or MPI's ERRORS_ARE_FATAL."""
    option = _rc_errors()
    if option == "default":
        return Errhandler(parent if parent is not None else ERRORS_ARE_FATAL)
    return Errhandler(_OF_RC.get(option, ERRORS_RETURN))


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


class _Calls(threading.local):
    """Per thread: ``frame``, [depth in guarded calls, (owner, object) of the outermost call]."""

    def __init__(self):
        self.frame = [0, None]


_calls = _Calls()


def invoke_on(comm, error: MPIException, call: str) -> None:
    """``invoke`` with the handler of ``comm`` if it is still live."""
    st = comm._live()
    if st is not None:
        invoke(comm, st, error, call)


def current_owner():
    """The object whose handler applies to the call this thread is in
    (a request takes its communicator's), or None outside calls."""
    outermost = _calls.frame[1]
    return outermost[0](outermost[1]) if outermost is not None else None


def in_a_call() -> bool:
    """Whether this thread is inside a guarded call (whose guard applies the
    handler to what it raises)."""
    return _calls.frame[0] > 0


def _guarded(method, call: str, owner):
    # Every call of the stand-in passes here: one thread-local lookup, no closure.
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        frame = _calls.frame
        depth = frame[0]
        frame[0] = depth + 1
        if depth == 0:
            frame[1] = (owner, self)  # whose handler the requests made in this call take
        try:
            return method(self, *args, **kwargs)
        except MPIException as exc:
            if depth == 0:  # the program's call, not one the stand-in makes inside it
                invoke_on(owner(self), exc, call)
            raise
        finally:
            frame[0] = depth
            if depth == 0:
                frame[1] = None

    guarded.unguarded = method
    return guarded


def guard_calls(cls, owner=lambda comm: comm) -> None:
    """Wrap every public method of ``cls`` (its mixins' included) so that its
    MPI errors go through the error handler of ``owner(obj)``: a
    communicator's own, or, for objects of no communicator (datatypes,
    infos, ops, error handlers), MPI.COMM_WORLD's, as under Open MPI."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        # what getattr_static finds, without its checks for what these classes never have
        method = next(klass.__dict__[name] for klass in cls.__mro__ if name in klass.__dict__)
        if inspect.isfunction(method):  # not static or class methods
            method = getattr(method, "unguarded", method)  # a base class's guard: one guard per call
            setattr(cls, name, _guarded(method, f"{cls.__name__}.{name}", owner))
