"""Generalized requests (``MPI.Grequest``): operations the program runs
itself and completes with ``Complete``.

``Grequest.Start(query_fn, free_fn, cancel_fn, args, kwargs)`` gives an
active request that no message completes: ``Wait`` waits (serving the
rank's messages, under the world's hang timeout) until the program calls
``Complete`` (from another thread, or before the Wait); a request never
completed is the world's hang, with the rank "running user code". Completing it, as
MPI says, calls ``query_fn(status, *args, **kwargs)`` to fill the status
(which starts as an empty one), then ``free_fn(*args, **kwargs)``;
``Cancel`` calls ``cancel_fn(completed, *args, **kwargs)``. An exception in
one of them is printed and the call raises it as ``MPI.Exception`` (its
own error code for an ``MPI.Exception``, ``MPI.ERR_OTHER`` for another).
"""

from __future__ import annotations

import sys
import time
import traceback

from . import _errhandlers, _runtime
from ._errors import ERR_OTHER, Exception as MPIException
from ._handles import new_handle
from ._requests import Request
from ._status import Status


_POLL = 0.0005  # seconds between looks at a generalized request that Wait waits for


class _GrequestOp:
    """The operation of a generalized request: done once ``Complete`` is called."""

    error = None
    cancelled = False
    pickled = True
    sink = None
    data = None
    desc = "Grequest (waiting for the program's Grequest.Complete)"

    def __init__(self, query_fn, free_fn, cancel_fn, args, kwargs):
        self.query_fn, self.free_fn, self.cancel_fn = query_fn, free_fn, cancel_fn
        self.args, self.kwargs = tuple(args or ()), dict(kwargs or {})
        self.done, self.freed, self.result = False, False, None


def _call(function, *args, **kwargs) -> None:
    """``function(...)``, an exception in it printed and raised as MPI's error."""
    try:
        function(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - printed, then MPI's error, as mpi4py does
        traceback.print_exception(exc, file=sys.stderr)
        code = exc.Get_error_code() if isinstance(exc, MPIException) else ERR_OTHER
        raise MPIException(code, f"the generalized request's {function.__name__} raised "
                           f"{type(exc).__name__}") from exc


class Grequest(Request):
    """``MPI.Grequest``: see the module docstring."""

    _generalized = True
    _freed_op = None  # the operation of a handle freed before Complete

    def _init(self, request: "Request | None" = None) -> None:
        if request is not None and request and not isinstance(request, Grequest):
            raise TypeError(f"expected an MPI.Grequest, got {type(request).__name__}")
        super()._init(request)

    @classmethod
    def Start(cls, query_fn=None, free_fn=None, cancel_fn=None, args=None, kwargs=None) -> "Grequest":
        request = new_handle(cls)
        request._engine = _runtime.get().engine
        request._op = _GrequestOp(query_fn, free_fn, cancel_fn, args, kwargs)
        request._comm = _errhandlers.current_owner()
        return request

    def Complete(self) -> None:
        """The program's operation is done: a Wait or Test completes the request."""
        op = self._op if self._op is not None else self._freed_op
        if op is not None:
            op.done = True
            if op.freed:  # Free came first: MPI calls free_fn at completion
                self._freed_op = None
                self._free_now(op)

    def complete(self, obj=None) -> None:
        """Complete, with ``obj`` as what the lowercase ``wait``/``test`` return."""
        if self._op is not None:
            self._op.result = obj
        self.Complete()

    def _wait(self, status):
        """Serve the rank's messages until the program completes the request
        (from another thread): a poll, not a wait in the transport, which
        would count the rank as blocked on its peers."""
        op = self._op
        while op is not None and not op.done:
            self._engine.progress()
            time.sleep(_POLL)
        return self._complete(status)

    def _complete(self, status: Status | None, handled: bool = True):
        op = self._op
        if op is None:
            return super()._complete(status, handled)
        self._deactivate()
        filled = Status()
        try:
            if op.query_fn is not None:
                _call(op.query_fn, filled, *op.args, **op.kwargs)
                if op.cancel_fn is None:
                    filled.cancelled = False
        except MPIException as error:
            self._free_now(op, raising=False)
            if handled:
                self._raise(error)
            raise
        if status is not None:
            status.__setstate__(filled.__getstate__())
        self._free_now(op)
        return op.result

    def _free_now(self, op, raising: bool = True) -> None:
        if op.free_fn is None:
            return
        try:
            _call(op.free_fn, *op.args, **op.kwargs)
        except MPIException:
            if raising:
                raise

    def Cancel(self) -> None:
        self._not_null("Cancel")
        op = self._op
        if op.cancel_fn is not None:
            _call(op.cancel_fn, op.done, *op.args, **op.kwargs)

    def Free(self) -> None:
        """Release the handle; free_fn runs now if the request is complete,
        else when the program completes it."""
        self._not_null("Free")
        op = self._op
        self._deactivate()
        op.freed = True
        if op.done:
            self._free_now(op)
        else:
            self._freed_op = op
