"""Error handlers and info objects of the stand-in.

An ``Errhandler`` is one of MPI's predefined handlers: ``ERRORS_RETURN``
(mpi4py's default on every communicator: an error raises ``MPI.Exception``),
``ERRORS_ARE_FATAL`` and ``ERRORS_ABORT`` (an error ends the job; see
``_errhandlers``), or ``ERRHANDLER_NULL``. An ``Info`` is a set of string
hints that change nothing here, with MPI's checks: the null handles
(``ERRHANDLER_NULL``, ``INFO_NULL``) cannot be changed, a call that would
change one raises the ``MPI.Exception`` Open MPI raises, and the predefined
handles survive ``Free``.
"""

from __future__ import annotations

import copyreg
import os
import platform
import socket
import sys

from ._errors import ERR_ARG, ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE
from ._errors import Exception as MPIException
from ._handles import Handle, IntegerHandles, check_handle, new_handle

MAX_INFO_KEY, MAX_INFO_VAL = 36, 256


class Errhandler(Handle, IntegerHandles):
    """An error handler: ``Errhandler(other)`` is another handle on the same one.

    ``_name`` identifies it: "MPI_ERRORS_RETURN", ... for a predefined one,
    a new object for each user handler (``Comm.Create_errhandler``), whose
    ``_function(comm, errorcode)`` the communicator calls on an error.
    """

    _constant = False  # True on MPI.ERRORS_RETURN, ...: Free leaves them as they are

    def _init(self, errhandler: "Errhandler | None" = None) -> None:
        if errhandler is not None:
            check_handle(errhandler, Errhandler, type(self))
        self._name = None if errhandler is None else errhandler._name  # None: MPI.ERRHANDLER_NULL
        self._function = None if errhandler is None else errhandler._function

    @classmethod
    def _predefined(cls, name: str) -> "Errhandler":
        handler = cls()
        handler._name, handler._constant = name, True
        return handler

    @classmethod
    def _user(cls, function) -> "Errhandler":
        """A user handler: at most MAX_USER_ERRHANDLERS live at once, as in mpi4py."""
        if not callable(function):
            raise TypeError(f"Create_errhandler: {function!r} is not callable")
        if len(_USER_ERRHANDLERS) >= MAX_USER_ERRHANDLERS:
            raise RuntimeError("cannot create too many user-defined error handlers")
        handler = cls()
        handler._name, handler._function = object(), function
        _USER_ERRHANDLERS.add(handler._name)
        return handler

    def __eq__(self, other):
        if not isinstance(other, Errhandler):
            return NotImplemented
        return self._name is other._name or self._name == other._name

    def __bool__(self):
        return self._name is not None

    def __repr__(self):
        name = self._name if isinstance(self._name, str) else "user" if self._name else "MPI_ERRHANDLER_NULL"
        return f"<mpi4py.MPI.Errhandler {name} (simdist)>"

    def __reduce__(self):  # the same as pickling does (``_handles``): a user handler cannot be pickled
        return copyreg.dispatch_table[type(self)](self)

    def Free(self) -> None:
        """Release this handle (a predefined handler itself stays valid)."""
        if self._name is None:
            raise MPIException(ERR_ARG, "Errhandler.Free of MPI.ERRHANDLER_NULL")
        if not self._constant:
            _USER_ERRHANDLERS.discard(self._name)
            self._name = self._function = None

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's ``free``)."""
        if self and not self._constant:
            self.Free()


    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Errhandler", name)


MAX_USER_ERRHANDLERS = 32
_USER_ERRHANDLERS: set = set()  # the live user handlers
ERRHANDLER_NULL = Errhandler()
ERRHANDLER_NULL._constant = True
ERRORS_RETURN = Errhandler._predefined("MPI_ERRORS_RETURN")
ERRORS_ABORT = Errhandler._predefined("MPI_ERRORS_ABORT")
ERRORS_ARE_FATAL = Errhandler._predefined("MPI_ERRORS_ARE_FATAL")


def _string(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected str, {type(value).__name__} found (the info {what})")
    return value


class Info(Handle, IntegerHandles):
    """An MPI info object: string keys to string values, with mpi4py's
    mapping methods. ``Info(other)`` is another handle on the same object."""

    _constant = False  # True on MPI.INFO_NULL and MPI.INFO_ENV

    def _init(self, info: "Info | None" = None) -> None:
        if info is not None:
            check_handle(info, Info, type(self))
        self._items = None if info is None else info._items  # None: MPI.INFO_NULL

    def __eq__(self, other):
        if not isinstance(other, Info):
            return NotImplemented
        return self._items is other._items

    def __bool__(self):
        return self._items is not None

    def __repr__(self):
        return f"<mpi4py.MPI.Info {'MPI_INFO_NULL' if self._items is None else self._items} (simdist)>"

    def _live(self, call: str) -> dict:
        if self._items is None:
            raise MPIException(ERR_INFO, f"Info.{call} of MPI.INFO_NULL (or of a freed info)")
        return self._items

    @staticmethod
    def _key(key, call: str) -> str:
        key = _string(key, "key")
        if not 0 < len(key) < MAX_INFO_KEY:
            raise MPIException(ERR_INFO_KEY, f"Info.{call}: the key {key!r} has {len(key)} characters; "
                               f"keys have 1 to {MAX_INFO_KEY - 1}")
        return key

    # -- MPI's calls --------------------------------------------------------------
    @classmethod
    def Create(cls, items=None) -> "Info":
        info = new_handle(cls)
        info._items = {}
        if items is not None:
            info.update(items)
        return info

    @classmethod
    def Create_env(cls, args=None) -> "Info":
        """A new info with what MPI_INFO_ENV holds (``args``: the command line, if given)."""
        items = dict(INFO_ENV._items)
        if args is not None:
            args = [str(arg) for arg in args]
            items.update(command=args[0] if args else "", argv=" ".join(args[1:]))
        return cls.Create(items)

    def Free(self) -> None:
        self._live("Free")
        if self._constant:
            raise MPIException(ERR_INFO, "Info.Free of MPI.INFO_ENV, a predefined info")
        self._items = None

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's ``free``)."""
        if self and not self._constant:
            self.Free()

    def Dup(self) -> "Info":
        info = new_handle(type(self))
        info._items = dict(self._live("Dup"))
        return info

    def Get(self, key: str) -> str | None:
        items = self._live("Get")
        return items.get(self._key(key, "Get"))

    def Set(self, key: str, value: str) -> None:
        items = self._live("Set")
        key, value = self._key(key, "Set"), _string(value, "value")
        if len(value) >= MAX_INFO_VAL:
            raise MPIException(ERR_INFO_VALUE, f"Info.Set: the value of {key!r} has {len(value)} characters; "
                               f"values have at most {MAX_INFO_VAL - 1}")
        if self._constant:
            raise MPIException(ERR_INFO, "Info.Set on MPI.INFO_ENV, a predefined info; Dup it first")
        items[key] = value

    def Delete(self, key: str) -> None:
        items = self._live("Delete")
        key = self._key(key, "Delete")
        if key not in items:
            raise MPIException(ERR_INFO_NOKEY, f"Info.Delete: no key {key!r}")
        del items[key]

    def Get_nkeys(self) -> int:
        return len(self._live("Get_nkeys"))

    def Get_nthkey(self, n: int) -> str:
        items = self._live("Get_nthkey")
        if n < 0:
            raise MPIException(ERR_ARG, f"Info.Get_nthkey({n}): a negative index")
        if n >= len(items):
            raise MPIException(ERR_INFO_KEY, f"Info.Get_nthkey({n}): the info has {len(items)} keys")
        return list(items)[n]

    # -- mpi4py's mapping methods (a null info is empty and refuses changes) -------------
    def __len__(self) -> int:
        return 0 if not self else self.Get_nkeys()

    def __contains__(self, key) -> bool:
        return bool(self) and self.Get(key) is not None

    def __iter__(self):
        return iter(self.keys())

    def __getitem__(self, key):
        value = self.Get(key) if self else None
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value) -> None:
        if not self:
            raise KeyError(key)
        self.Set(key, value)

    def __delitem__(self, key) -> None:
        if key not in self:
            raise KeyError(key)
        self.Delete(key)

    def get(self, key, default=None):
        value = self.Get(key) if self else None
        return default if value is None else value

    def keys(self) -> list:
        return [] if not self else list(self._items)

    def values(self) -> list:
        return [] if not self else list(self._items.values())

    def items(self) -> list:
        return [] if not self else list(self._items.items())

    def update(self, items=(), **kwds) -> None:
        if not self:
            raise KeyError
        pairs = [(key, items[key]) for key in items.keys()] if hasattr(items, "keys") else list(items)
        for key, value in pairs + list(kwds.items()):
            self.Set(key, value)

    def pop(self, key, *default):
        value = self.Get(key) if self else None
        if value is not None:
            self.Delete(key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self):
        if not self or not self.Get_nkeys():
            raise KeyError
        key = self.Get_nthkey(self.Get_nkeys() - 1)
        return key, self.pop(key)

    def copy(self) -> "Info":
        return type(self)() if not self else self.Dup()

    def clear(self) -> None:
        if self:
            for key in self.keys():
                self.Delete(key)

    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Info", name)


def _environment() -> dict:
    """What MPI_INFO_ENV holds (the keys MPI names; the values of this process)."""
    return {"command": os.path.basename(sys.executable), "argv": " ".join(sys.argv[1:]), "maxprocs": "1",
            "soft": "1", "host": socket.gethostname(), "arch": platform.machine(), "wdir": os.getcwd(),
            "thread_level": "MPI_THREAD_SERIALIZED"}


def refresh_environment() -> None:
    """MPI_INFO_ENV as of this run's start (a rank's process may run several
    programs, each from its own folder). A long command line or directory
    (pytest's, say) is cut to what an info value may hold."""
    INFO_ENV._items = {key: value[:MAX_INFO_VAL - 1] for key, value in _environment().items()}


INFO_NULL = Info()
INFO_NULL._constant = True
INFO_ENV = Info.Create()
INFO_ENV._constant = True
refresh_environment()
