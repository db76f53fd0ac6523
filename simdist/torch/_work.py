"""The ``Work`` a call returns.

A collective has finished when its call returns (every rank has met in it),
so it returns ``finished``: a Work whose future already holds the tensors.
A point-to-point call posts a request of the simulated MPI and returns a
``Pending`` whose ``wait`` completes it: an ``isend`` that no one has
received yet must not hold its rank, as under Gloo.
"""

from __future__ import annotations

from torch._C._distributed_c10d import Work, _create_work_from_future
from torch.futures import Future

from . import _profiling


def finished(result) -> Work:
    future = Future()
    future.set_result(result)
    return _create_work_from_future(future)


class Pending(Work):
    """A posted send or receive of ``tensors`` through ``staged`` (their
    contiguous form, kept alive until the request completes); a receive
    writes ``staged`` back into the tensor then, and the call's profiler
    ``event`` (``_profiling``) ends."""

    def __init__(self, MPI, request, tensors, staged, receive: bool, event=None):
        super().__init__()
        self._MPI = MPI
        self._request, self._tensors, self._staged, self._receive = request, tensors, staged, receive
        self._event = event
        self._future: Future | None = None
        self._source = -1

    def _finish(self, status) -> None:
        if self._request is None:
            return
        self._request = None
        self._source = status.Get_source()
        if self._receive:
            self._staged.done()
        self._staged = None
        _profiling.end(self._event)
        self._event = None
        if self._future is not None:
            self._future.set_result(self._tensors)

    def wait(self, timeout=None) -> bool:
        if self._request is not None:
            status = self._MPI.Status()
            self._request.Wait(status)
            self._finish(status)
        return True

    def is_completed(self) -> bool:
        if self._request is not None:
            status = self._MPI.Status()
            if self._request.Test(status):
                self._finish(status)
        return self._request is None

    def is_success(self) -> bool:
        return self.is_completed()

    def exception(self):
        return None

    def source_rank(self) -> int:
        return self._source

    def _source_rank(self) -> int:
        return self._source

    def result(self):
        return self._tensors

    def get_future(self) -> Future:
        if self._future is None:
            self._future = Future()
            if self._request is None:
                self._future.set_result(self._tensors)
        return self._future

    def synchronize(self) -> None:
        self.wait()
