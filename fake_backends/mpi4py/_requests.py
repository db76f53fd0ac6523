"""Request (and persistent Prequest) of the stand-in.

A Request wraps one operation of the progress engine (``_p2p``). Waiting
runs the engine until the operation is done; then the request becomes
inactive and compares equal to ``MPI.REQUEST_NULL``, as in mpi4py. The
uppercase methods (``Wait``, ``Waitall``, ...) return what MPI returns; the
lowercase ones (``wait``, ``waitall``, ...) return the received objects of
``irecv`` (None for sends and buffer receives).
"""

from __future__ import annotations

from . import _errhandlers, _latereads, _misuse
from ._buffered import check_space
from ._errors import ERR_REQUEST, SUCCESS, Exception as MPIException
from ._handles import Handle, IntegerHandles, check_handle, new_handle
from ._p2p import ANY_SOURCE, ANY_TAG, PROC_NULL, RecvOp, SendOp
from ._pickle import pickle
from ._status import UNDEFINED, Status, _slots

class _Done:
    """An operation that completed when it was posted (PROC_NULL)."""

    done = True
    error = None
    cancelled = False
    pickled = True
    sink = None
    data = None
    status = (PROC_NULL, ANY_TAG, 0)


DONE = _Done()


class _Text:
    """A text made when it is read (a collective's names the ranks not heard from at the time)."""

    def __init__(self, make):
        self._make = make

    def __str__(self):
        return self._make()


def _desc(op) -> _Text:
    return _Text(lambda: f"Wait for {op.desc}" if getattr(op, "desc", None) else "Wait")


def _ops(requests) -> list:
    """The operations of the active ``requests`` (what a Waitall waits for)."""
    return [req._op for req in requests if req._op is not None]


class Request(Handle, IntegerHandles):
    """A nonblocking operation (``Isend``, ``Irecv``, ``isend``, ``irecv``, ...)."""

    _persistent = None  # the handle of a persistent request (Prequest), or of a copy of one
    _comm = None  # the communicator whose error handler the errors of completion go through

    def _init(self, request: "Request | None" = None) -> None:
        self._op = None
        self._engine = None
        if request is not None:
            check_handle(request, Request, type(self))
            self._op, self._engine, self._persistent = request._op, request._engine, request._persistent
            self._comm = request._comm

    @classmethod
    def _of(cls, engine, op, comm=None) -> "Request":
        req = new_handle(cls)
        req._engine, req._op = engine, op
        req._comm = comm if comm is not None else _errhandlers.current_owner()
        return req

    def _raise(self, error, call: str = "Request.Wait"):
        """Raise the error of a completion after the communicator's error
        handler (unless a call of the communicator applies it itself)."""
        if self._comm is not None and not _errhandlers.in_a_call():
            _errhandlers.invoke_on(self._comm, error, call)
        raise error

    def _handle(self):
        """What identifies the request: a persistent request's handle, else
        its operation (None once complete: then it is MPI.REQUEST_NULL)."""
        return self._op if self._persistent is None else self._persistent

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        return self._handle() is other._handle()

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __bool__(self):
        return self._handle() is not None

    def __repr__(self):
        return f"<mpi4py.MPI.{type(self).__name__} {'null' if self._op is None else 'active'} (simdist)>"

    # -- completion -----------------------------------------------------------------
    def _done(self) -> bool:
        return self._op is None or self._op.done

    def _complete(self, status: Status | None, handled: bool = True):
        """Finish a done operation: fill ``status``, deactivate, raise its
        error (through the error handler if ``handled``); return the received
        object (lowercase API) or None."""
        op = self._op
        if op is None:
            if status is not None:
                status._set(ANY_SOURCE, ANY_TAG, 0)
            return None
        self._deactivate()
        if op.error is not None:
            if status is not None:
                status.error = op.error.ierr
            if handled:
                self._raise(op.error)
            raise op.error
        if isinstance(op, SendOp):
            if status is not None:
                status.error = SUCCESS
            return None
        if op.cancelled:
            if status is not None:
                status._set(ANY_SOURCE, ANY_TAG, 0, cancelled=True)
            return None
        if status is not None:
            status._set(*op.status)
        if op.sink is None and op.data is not None and op.data.size:
            return pickle.loads(memoryview(op.data))
        return None  # a message of 0 bytes to the lowercase API is None, as under Open MPI

    def _deactivate(self) -> None:
        if self._op is not None:
            _misuse.completed(self._op)
            _latereads.completed(self._op)
        self._op = None

    def _wait(self, status):
        if self._op is not None and not self._op.done:
            self._engine.wait_until(lambda: self._op.done, _desc(self._op), (self._op,))
        return self._complete(status)

    def _test(self, status):
        if self._op is not None and not self._op.done:
            self._engine.progress()
        if not self._done():
            return False, None
        return True, self._complete(status)

    def Wait(self, status: Status | None = None) -> bool:
        self._wait(status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        return self._test(status)[0]

    def wait(self, status: Status | None = None):
        return self._wait(status)

    def test(self, status: Status | None = None):
        return self._test(status)

    def _peek(self, status) -> bool:
        """Whether the operation is done, filling ``status`` without
        completing it (MPI_Request_get_status); a null or inactive request
        is done, with an empty status."""
        op = self._op
        if op is not None and not op.done:
            return False
        if status is not None:
            if op is None or isinstance(op, SendOp):
                status._set(ANY_SOURCE, ANY_TAG, 0)
            elif op.cancelled:
                status._set(ANY_SOURCE, ANY_TAG, 0, cancelled=True)
            else:
                status._set(*op.status)
        return True

    def Get_status(self, status: Status | None = None) -> bool:
        if self._op is not None and not self._op.done:
            self._engine.progress()
        return self._peek(status)

    get_status = Get_status

    @classmethod
    def _progress(cls, requests) -> list:
        requests = list(requests)
        engine = cls._engine_of(requests)
        if engine is not None:
            engine.progress()
        return requests

    @classmethod
    def Get_status_all(cls, requests, statuses=None) -> bool:
        """Whether every request is done (their statuses filled); none is completed."""
        requests = cls._progress(requests)
        if not all(req._done() for req in requests):
            return False
        for req, status in zip(requests, _slots(statuses, len(requests))):
            req._peek(status)
        return True

    @classmethod
    def Get_status_any(cls, requests, status=None):
        """(index, True) of a done active request, (UNDEFINED, True) if none
        is active, (UNDEFINED, False) if none is done; none is completed."""
        requests = cls._progress(requests)
        active = [i for i, req in enumerate(requests) if req._op is not None]
        if not active:
            return UNDEFINED, Request()._peek(status)
        index = next((i for i in active if requests[i]._op.done), None)
        if index is None:
            return UNDEFINED, False
        return index, requests[index]._peek(status)

    @classmethod
    def Get_status_some(cls, requests, statuses=None):
        """The indices of the done active requests (None if none is active); none is completed."""
        requests = cls._progress(requests)
        active = [i for i, req in enumerate(requests) if req._op is not None]
        if not active:
            return None
        indices = [i for i in active if requests[i]._op.done]
        for i, status in zip(indices, _slots(statuses, len(indices))):
            requests[i]._peek(status)
        return indices

    get_status_all = Get_status_all
    get_status_any = Get_status_any
    get_status_some = Get_status_some

    def Cancel(self) -> None:
        """Cancel a receive that no message has matched yet (a send cannot
        be cancelled here: the cancel fails and the send completes normally,
        which MPI allows)."""
        self._not_null("Cancel")
        if getattr(self._op, "collective", False):
            raise MPIException(ERR_REQUEST, f"Request.Cancel of a collective request ({self._op.desc}): MPI "
                                            "forbids it")
        if isinstance(self._op, RecvOp) and not self._op.done:
            self._engine.cancel(self._op)

    cancel = Cancel

    def Free(self) -> None:
        self._not_null("Free")
        self._deactivate()

    def free(self) -> None:
        if self:
            self.Free()

    def _not_null(self, call: str) -> None:
        if not self:
            raise MPIException(ERR_REQUEST, f"Request.{call} of MPI.REQUEST_NULL")

    # -- many requests --------------------------------------------------------------
    @staticmethod
    def _engine_of(requests):
        for req in requests:
            if req._op is not None:
                return req._engine
        return None

    @classmethod
    def _waitall(cls, requests, statuses):
        requests = list(requests)
        engine = cls._engine_of(requests)
        if engine is not None and not all(req._done() for req in requests):
            engine.wait_until(lambda: all(req._done() for req in requests), "Waitall", _ops(requests))
        return cls._complete_all(requests, statuses)

    @staticmethod
    def _complete_all(requests, statuses):
        results, error, failed = [], None, None
        for req, status in zip(requests, _slots(statuses, len(requests))):
            try:
                results.append(req._complete(status, handled=False))
            except MPIException as exc:
                error, failed = error or exc, failed or req
                results.append(None)
        if error is not None:
            failed._raise(error, "Request.Waitall")  # the handler once, as for MPI_ERR_IN_STATUS
        return results

    @classmethod
    def _waitany(cls, requests, status):
        requests = list(requests)
        active = [i for i, req in enumerate(requests) if req._op is not None]
        if not active:
            if status is not None:
                status._set(ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, None
        engine = requests[active[0]]._engine

        def first_done():
            return next((i + 1 for i in active if requests[i]._op.done), 0)

        index = first_done() or engine.wait_until(first_done, "Waitany", _ops(requests))
        index -= 1
        return index, requests[index]._complete(status)

    @classmethod
    def _testany(cls, requests, status):
        requests = list(requests)
        active = [i for i, req in enumerate(requests) if req._op is not None]
        if not active:
            if status is not None:
                status._set(ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, True, None
        requests[active[0]]._engine.progress()
        for i in active:
            if requests[i]._op.done:
                return i, True, requests[i]._complete(status)
        return UNDEFINED, False, None

    @classmethod
    def _some(cls, requests, statuses, block):
        requests = list(requests)
        active = [i for i, req in enumerate(requests) if req._op is not None]
        if not active:
            return None, None
        engine = requests[active[0]]._engine
        if block:
            engine.wait_until(lambda: any(requests[i]._op.done for i in active), "Waitsome", _ops(requests))
        else:
            engine.progress()
        indices = [i for i in active if requests[i]._op.done]
        return indices, cls._complete_all([requests[i] for i in indices], statuses)  # all, then the error

    @classmethod
    def Waitall(cls, requests, statuses=None) -> bool:
        cls._waitall(requests, statuses)
        return True

    @classmethod
    def waitall(cls, requests, statuses=None) -> list:
        return cls._waitall(requests, statuses)

    @classmethod
    def Testall(cls, requests, statuses=None) -> bool:
        return cls.testall(requests, statuses)[0]

    @classmethod
    def testall(cls, requests, statuses=None):
        requests = list(requests)
        engine = cls._engine_of(requests)
        if engine is not None:
            engine.progress()
        if not all(req._done() for req in requests):
            return False, None
        return True, cls._complete_all(requests, statuses)

    @classmethod
    def Waitany(cls, requests, status=None) -> int:
        return cls._waitany(requests, status)[0]

    @classmethod
    def waitany(cls, requests, status=None):
        return cls._waitany(requests, status)

    @classmethod
    def Testany(cls, requests, status=None):
        index, flag, _ = cls._testany(requests, status)
        return index, flag

    @classmethod
    def testany(cls, requests, status=None):
        return cls._testany(requests, status)

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        return cls._some(requests, statuses, True)[0]

    @classmethod
    def waitsome(cls, requests, statuses=None):
        return cls._some(requests, statuses, True)

    @classmethod
    def Testsome(cls, requests, statuses=None):
        return cls._some(requests, statuses, False)[0]

    @classmethod
    def testsome(cls, requests, statuses=None):
        return cls._some(requests, statuses, False)

    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Request", name)


REQUEST_NULL = Request()


class _Persistent:
    """The handle of a persistent request: it outlives each operation."""


class Prequest(Request):
    """A persistent request (``Send_init``, ``Recv_init``, ...). ``Start``
    posts the prepared operation; completing it leaves the request
    *inactive*: not MPI.REQUEST_NULL, a Wait or Test on it returns at once
    with an empty status, and ``Start`` posts it again. Only ``Free`` makes
    it MPI.REQUEST_NULL."""

    def _init(self, request=None, *, _start=None, _buffered=None) -> None:
        if getattr(request, "_generalized", False) and request:
            raise TypeError("expected an MPI.Prequest, got MPI.Grequest")
        super()._init(request)
        self._start = _start if request is None else getattr(request, "_start", None)
        # a buffered send's (engine, bytes of the attached buffer it takes)
        self._buffered = _buffered if request is None else getattr(request, "_buffered", None)
        if self._start is not None and self._persistent is None:
            self._persistent = _Persistent()

    def __repr__(self):
        state = "null" if self._start is None else "active" if self._op is not None else "inactive"
        return f"<mpi4py.MPI.Prequest {state} (simdist)>"

    def _check_startable(self) -> None:
        if self._start is None:
            raise MPIException(ERR_REQUEST, "Start on a null persistent request")
        if self._op is not None:
            raise MPIException(ERR_REQUEST, "Start on a persistent request that is still active")

    def _post(self) -> None:
        req = self._start()  # prepared at init: posting does not raise
        self._engine, self._op = req._engine, req._op

    def Start(self) -> None:
        self._check_startable()
        self._post()

    @classmethod
    def Startall(cls, requests) -> None:
        """Start every request, or (when one cannot be started) none."""
        requests = list(requests)
        for req in requests:
            if not isinstance(req, Prequest):
                raise MPIException(ERR_REQUEST, f"Startall: {req!r} is not a persistent request")
            req._check_startable()
        if len({id(req._persistent) for req in requests}) < len(requests):
            raise MPIException(ERR_REQUEST, "Startall: a persistent request appears twice")
        buffered = [req._buffered for req in requests if req._buffered and req._buffered[1]]
        if buffered:  # every buffered send fits in the attached buffer, or none starts
            check_space(buffered[0][0], sum(nbytes for _, nbytes in buffered), "Startall")
        for req in requests:
            req._post()

    def Free(self) -> None:
        """Release the request (an active operation still completes)."""
        _misuse.persistent_freed(self)
        self._op, self._start, self._persistent = None, None, None

    free = Free
