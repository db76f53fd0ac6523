"""Status: the source, tag, size, error and cancellation of a completed
operation, as ``MPI.Status`` gives them."""

from __future__ import annotations

import numpy as np

from ._datatypes import TYPES
from ._errors import SUCCESS
from ._handles import Handle, check_handle
from ._p2p import ANY_SOURCE, ANY_TAG

UNDEFINED = -32766


def _field(index: int, kind=int) -> property:
    """A field of the status's C memory (Open MPI's ``MPI_Status``)."""
    return property(lambda self: kind(self._c[index]), lambda self, value: self._c.__setitem__(index, int(value)))


class Status(Handle):
    """The source, tag, size and error of a received message.

    The fields live in memory laid out as Open MPI's ``MPI_Status`` (source,
    tag, error, cancelled, then the byte count as a 64-bit integer), which
    ``tomemory()`` exposes as mpi4py does."""

    source = _field(0)
    tag = _field(1)
    error = _field(2)
    cancelled = _field(3, bool)
    _nbytes = property(lambda self: int(self._c[4:6].view(np.int64)[0]),
                       lambda self, value: self._c[4:6].view(np.int64).__setitem__(0, int(value)))

    def _init(self, status: "Status | None" = None) -> None:
        self._c = np.zeros(6, dtype=np.intc)
        self.source, self.tag, self.error, self._nbytes, self.cancelled = ANY_SOURCE, ANY_TAG, SUCCESS, 0, False
        if status is not None:
            check_handle(status, Status, type(self))
            self.source, self.tag, self.error = status.source, status.tag, status.error
            self._nbytes, self.cancelled = status._nbytes, status.cancelled

    def _set(self, source: int, tag: int, nbytes: int, cancelled: bool = False) -> None:
        self.source, self.tag, self._nbytes, self.error, self.cancelled = source, tag, nbytes, SUCCESS, cancelled

    def __eq__(self, other):
        if not isinstance(other, Status):
            return NotImplemented
        return self.__getstate__() == other.__getstate__()

    def __getstate__(self):
        return {"source": self.source, "tag": self.tag, "error": self.error, "count": self._nbytes,
                "cancelled": self.cancelled}

    def __setstate__(self, state):
        self._c = np.zeros(6, dtype=np.intc)
        self.source, self.tag, self.error = state["source"], state["tag"], state["error"]
        self._nbytes, self.cancelled = state["count"], state["cancelled"]

    def __repr__(self):
        return f"<mpi4py.MPI.Status source={self.source} tag={self.tag} count={self._nbytes} (simdist)>"

    def Get_source(self) -> int:
        return self.source

    def Set_source(self, source: int) -> None:
        self.source = int(source)

    def Get_tag(self) -> int:
        return self.tag

    def Set_tag(self, tag: int) -> None:
        self.tag = int(tag)

    def Get_error(self) -> int:
        return self.error

    def Set_error(self, error: int) -> None:
        self.error = int(error)

    def Get_count(self, datatype=TYPES["BYTE"]) -> int:
        """Whole elements of ``datatype`` received (MPI.UNDEFINED if the
        bytes are not a whole number of them)."""
        size = datatype.Get_size()
        if size == 0:
            return 0 if self._nbytes == 0 else UNDEFINED
        return self._nbytes // size if self._nbytes % size == 0 else UNDEFINED

    def Get_elements(self, datatype) -> int:
        """Basic elements received (of a derived datatype: those of its type
        map, as far as the bytes go; MPI.UNDEFINED if they end inside one)."""
        if not datatype._is_derived():
            return self.Get_count(datatype)
        elements = datatype._typemap("Get_elements").elements(self._nbytes)
        return UNDEFINED if elements is None else elements

    def Set_elements(self, datatype, count: int) -> None:
        count = int(count)
        if not datatype._is_derived():
            self._nbytes = count * datatype.Get_size()
            return
        tm = datatype._typemap("Set_elements")
        whole, rest = divmod(count, max(tm.codes.size, 1))
        self._nbytes = whole * tm.size + int(tm.sizes[:rest].sum())

    def Is_cancelled(self) -> bool:
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        self.cancelled = bool(flag)

    def tomemory(self) -> memoryview:
        """The status's memory, as C ``int`` items (writes change the fields)."""
        return memoryview(self._c)

    def py2f(self) -> list[int]:
        """The Fortran status: the C status's ``int`` items (Open MPI's
        ``MPI_F_STATUS_SIZE`` of them, ``F_SOURCE``, ``F_TAG``, ``F_ERROR`` first)."""
        return [int(item) for item in self._c]

    @classmethod
    def f2py(cls, arg) -> "Status":
        """A status from a Fortran status (see ``py2f``)."""
        items = [int(item) for item in arg]
        status = cls()
        if len(items) != status._c.size:
            raise ValueError(f"Status.f2py: expecting {status._c.size} integers (MPI.F_STATUS_SIZE), "
                             f"got {len(items)}")
        status._c[...] = items
        return status

    count = property(Get_count, lambda self, count: self.Set_elements(TYPES["BYTE"], count))


def _slots(statuses, n: int) -> list:
    """The statuses to fill for ``n`` requests: a list is extended to ``n``
    (as mpi4py does), a tuple's entries are used as far as they go."""
    if statuses is None:
        return [None] * n
    if isinstance(statuses, list):
        statuses.extend(Status() for _ in range(n - len(statuses)))
        return statuses[:n]
    return list(statuses)[:n] + [None] * (n - len(statuses))
