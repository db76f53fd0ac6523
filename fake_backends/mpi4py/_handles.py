"""What every handle class of the stand-in shares with mpi4py's: how a
handle is made, compared and pickled.

Making (``Handle``): ``cls()`` is a null handle and ``cls(other)`` another
handle on what ``other`` refers to (a TypeError for anything else), made
in ``__new__`` as mpi4py's are, so that a subclass's own ``__new__`` can
call ``super().__new__(cls, other)`` with a handle of its choice (its
``__init__`` is then called with the original arguments and must not
undo that). Each class sets its state in ``_init``. A call that returns a
new handle of the caller's class (``Dup``, ``Clone``, ``Create``, ...)
makes it with ``new_handle(cls)``: ``cls.__new__(cls)``, as mpi4py does.
Handles are not hashable (they compare by what they refer to, which
``Free`` changes).

Pickling, as mpi4py's:

* A predefined handle (``MPI.COMM_NULL``, ``MPI.COMM_WORLD``,
  ``MPI.ERRORS_RETURN``, ``MPI.INFO_NULL``, ``MPI.DOUBLE``, ``MPI.MAX``,
  ``MPI.REQUEST_NULL``, ``MPI.MESSAGE_NULL``, ...) pickles as its name:
  unpickling gives that very object.
* Another handle on a predefined one (``MPI.Datatype(MPI.DOUBLE)``, a null
  ``MPI.Comm()``, what ``Get_errhandler`` returns, an instance of a
  subclass) gives a new handle of its class, equal to it, made by the
  class's ``__new__`` with the predefined handle.
* An info gives a new info of its class with the same items, a Dup'ed
  datatype a new Dup, a user op a new op of the same function (pickled by
  reference).
* Another communicator, group, request, message, window, file or session
  cannot be pickled (ValueError, as in mpi4py).

``register(namespace)`` (the MPI module's globals) names the predefined
handles and installs the reducers in ``copyreg``'s table and as the
classes' ``__reduce__``.
"""

from __future__ import annotations

import copyreg

_NAMESPACE: dict = {}  # the MPI module's globals: name -> object
_NAMES: dict[int, str] = {}  # id of a predefined handle -> its name in MPI
_INTEGERS: list = []  # integer handle -> a handle on that MPI object (IntegerHandles)


class Handle:
    """How a handle is made (see the module docstring)."""

    __hash__ = None  # type: ignore[assignment]

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._init(*args, **kwargs)
        return self

    def _init(self, *args, **kwargs) -> None:
        raise NotImplementedError


def new_handle(cls):
    """A new null handle of ``cls`` for a call to fill: made by ``cls.__new__``
    alone, as mpi4py makes the handles its calls return (a subclass's own
    ``__new__`` runs, its ``__init__`` does not)."""
    return cls.__new__(cls)


def check_handle(handle, base: type, cls: type) -> None:
    """The TypeError of ``cls(handle)`` when ``handle`` is no handle of ``base``."""
    if not isinstance(handle, base):
        raise TypeError(f"expected an MPI.{base.__name__}, got {type(handle).__name__} ({cls.__name__}(...))")


class IntegerHandles:
    """``toint``/``fromint``, ``py2f``/``f2py`` and ``handle``/``fromhandle``:
    an integer for a handle, and a new handle equal to it for the integer.
    The integers are the stand-in's own (an index into this rank's table),
    not Open MPI's."""

    def toint(self) -> int:
        for index, known in enumerate(_INTEGERS):
            if type(known) is type(self) and known == self:
                return index
        _INTEGERS.append(type(self)(self))
        return len(_INTEGERS) - 1

    py2f = toint

    @classmethod
    def fromint(cls, arg: int):
        try:
            known = _INTEGERS[arg] if arg >= 0 else None
        except IndexError:
            known = None
        if not isinstance(known, cls):
            raise ValueError(f"{arg!r} is no integer handle of an MPI.{cls.__name__} on this rank")
        handle = cls(known)
        handle._by_integer = True  # as in mpi4py, such a handle on a user op does not pickle
        return handle

    f2py = fromint

    @property
    def handle(self) -> int:
        """The integer of ``toint`` (mpi4py: the C handle's value)."""
        return self.toint()

    @classmethod
    def fromhandle(cls, handle: int):
        """A new handle equal to the one of ``handle``."""
        return cls.fromint(handle)


class FreeableHandles:
    """The identity of handles on a state that can be freed (communicators,
    windows): handles are equal when they refer to the same live state, and
    a freed or null one is false. ``_handle_base`` holds the class whose
    handles compare with each other (in a tuple: a class attribute that is
    a class would make the class look like a namespace of classes)."""

    _handle_base: tuple = (object,)
    _state = None

    def _live(self):
        st = self._state
        return None if st is None or st.freed else st

    def __eq__(self, other):
        if not isinstance(other, self._handle_base):
            return NotImplemented
        return self._live() is other._live()

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self):
        return self._live() is not None


def is_constant(handle) -> bool:
    """Whether ``handle`` is a predefined handle object itself
    (``MPI.COMM_WORLD``, not ``MPI.Comm(MPI.COMM_WORLD)``): its ``free()``
    does nothing, where a copy's makes the copy null."""
    return _constant_name(handle) is not None


def predefined(name: str):
    """The predefined handle ``MPI.<name>`` (what a pickled one loads as)."""
    return _NAMESPACE[name]


def _constant_name(obj) -> str | None:
    name = _NAMES.get(id(obj))
    return name if name is not None and _NAMESPACE.get(name) is obj else None


def _refused(obj):
    raise ValueError(f"cannot serialize 'mpi4py.MPI.{type(obj).__name__}' instance")


def _reduce_null_or_refused(obj):
    """Communicators, groups, requests, messages, windows, files, sessions:
    only null and predefined handles travel (a copy of ``MPI.COMM_WORLD``
    gives a new handle of its class, equal to it)."""
    for name, value in _NAMESPACE.items():
        if _constant_name(value) == name and _same_kind(value, obj) and value == obj:
            return _on_constant(obj, value)
    _refused(obj)


def _on_constant(obj, constant):
    """``type(obj).__new__(type(obj), constant)`` when unpickled."""
    return copyreg.__newobj__, (type(obj), constant)


def _same_kind(constant, obj) -> bool:
    """Whether ``constant`` is a handle of ``obj``'s kind (a Comm and an Intracomm are)."""
    return isinstance(obj, type(constant)) or isinstance(constant, type(obj))


def _reduce_same_handle(obj):
    """Errhandlers (all predefined), datatypes, ops: a new handle on the same one."""
    if getattr(obj, "_function", None) is not None:
        if not hasattr(obj, "_commute"):
            _refused(obj)  # a user error handler
        if getattr(obj, "_by_integer", False):  # mpi4py knows the function of the handles it made only
            raise ValueError("cannot pickle user-defined reduction operation")
        return type(obj).Create, (obj._function, obj._commute)  # a user op
    if isinstance(getattr(obj, "_id", ""), str):  # a handle on a predefined one
        return _on_constant(obj, _constant_where(obj, lambda value: value == obj))
    if getattr(obj, "_key", None) == "DERIVED":
        return obj._reduce_derived()
    return _dup_of, (_constant_where(obj, lambda value: value._id == obj._key),)  # a Dup'ed datatype


def _constant_where(obj, test):
    """The predefined handle of ``obj``'s kind that passes ``test``."""
    for name, value in _NAMESPACE.items():
        if isinstance(obj, type(value)) and _constant_name(value) == name and test(value):
            return value
    raise ValueError(f"cannot serialize this 'mpi4py.MPI.{type(obj).__name__}' instance")


def _dup_of(datatype):
    return datatype.Dup()


def _reduce_info(info):
    for name in ("INFO_NULL", "INFO_ENV"):  # another handle on one of them
        if info == _NAMESPACE.get(name):
            return _on_constant(info, _NAMESPACE[name])
    return type(info).Create, (info.items(),)


def _reducer(fallback):
    def reduce(obj):
        name = _constant_name(obj)
        if name is not None:
            return predefined, (name,)
        return fallback(obj)

    return reduce


def register(namespace: dict, *, null_or_refused, same_handle, info) -> None:
    """Name the predefined handles of ``namespace`` and install the reducers
    for the handle classes given (each with its subclasses of the stand-in)."""
    _NAMESPACE.clear()
    _NAMESPACE.update(namespace)
    _INTEGERS.clear()
    classes = (*null_or_refused, *same_handle, *info)
    for name, value in namespace.items():
        if isinstance(value, classes) and name.isupper():
            _NAMES.setdefault(id(value), name)
    for group, fallback in ((null_or_refused, _reduce_null_or_refused), (same_handle, _reduce_same_handle),
                            (info, _reduce_info)):
        for cls in group:
            reduce = _reducer(fallback)
            copyreg.pickle(cls, reduce)
            cls.__reduce__ = reduce  # handle.__reduce__(), which mpi4py's tests call, answers the same
