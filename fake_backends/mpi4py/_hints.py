"""Error handlers and info objects of the stand-in: hints that MPI lets an
implementation ignore. Errors always raise Python exceptions (mpi4py's
default policy), and info hints change nothing.
"""

from __future__ import annotations


class Errhandler:
    """Error handlers are accepted and ignored: errors always raise."""

    def __init__(self, errhandler=None, *, _name="MPI_ERRHANDLER_NULL"):
        self._name = _name if errhandler is None else errhandler._name

    def __eq__(self, other):
        return isinstance(other, Errhandler) and self._name == other._name

    def __hash__(self):
        return hash(self._name)

    def __bool__(self):
        return self._name != "MPI_ERRHANDLER_NULL"

    def Free(self):
        pass

    free = Free


ERRHANDLER_NULL = Errhandler()
ERRORS_RETURN = Errhandler(_name="MPI_ERRORS_RETURN")
ERRORS_ABORT = Errhandler(_name="MPI_ERRORS_ABORT")
ERRORS_ARE_FATAL = Errhandler(_name="MPI_ERRORS_ARE_FATAL")


class Info(dict):
    """An MPI info object: a dict of str to str (hints, ignored here)."""

    @classmethod
    def Create(cls, items=None) -> "Info":
        return cls(items or {})

    def Free(self) -> None:
        self.clear()

    free = Free

    def Dup(self) -> "Info":
        return Info(self)

    def Get(self, key: str):
        return self.get(key)

    def Set(self, key: str, value: str) -> None:
        self[key] = value

    def Delete(self, key: str) -> None:
        del self[key]

    def Get_nkeys(self) -> int:
        return len(self)

    def Get_nthkey(self, n: int) -> str:
        return list(self)[n]
