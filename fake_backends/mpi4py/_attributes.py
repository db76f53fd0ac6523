"""User attributes of communicators, datatypes and windows (MPI's "caching").

``Create_keyval(copy_fn, delete_fn, nopython)`` makes a key (an int, one
numbering for every kind of object, as in Open MPI); ``Set_attr``,
``Get_attr`` and ``Delete_attr`` keep a value on one object under it. As in
mpi4py:

- ``copy_fn(obj, keyval, value)`` runs when the object is duplicated
  (``Dup``) and gives the duplicate's value; ``NotImplemented`` copies
  nothing, ``True`` copies the value itself, ``None``/``False`` nothing;
- ``delete_fn(obj, keyval, value)`` runs when the value goes: at
  ``Delete_attr``, when ``Set_attr`` replaces it, and when the object is
  freed;
- ``obj`` in a callback is a new handle on the object, made null when the
  callback returns; an exception in a callback is printed and the call
  raises ``MPI.Exception(MPI.ERR_OTHER)``;
- ``nopython=True`` keeps integers (C pointers in mpi4py).

A freed key cannot be set or got any more; values already kept under it
stay until they are deleted, with their callbacks.
"""

from __future__ import annotations

import sys
import traceback

from ._errors import ERR_KEYVAL, ERR_OTHER, Exception as MPIException

KEYVAL_INVALID = -1
_FIRST_KEYVAL = 64  # above every predefined attribute key


class _Keyval:
    __slots__ = ("kind", "copy_fn", "delete_fn", "nopython", "freed")

    def __init__(self, kind: str, copy_fn, delete_fn, nopython: bool):
        self.kind = kind
        self.copy_fn = None if copy_fn is False else copy_fn
        self.delete_fn = None if delete_fn in (False, True) else delete_fn
        self.nopython, self.freed = bool(nopython), False


_KEYVALS: dict[int, _Keyval] = {}


def create_keyval(kind: str, copy_fn, delete_fn, nopython: bool) -> int:
    keyval = _FIRST_KEYVAL + len(_KEYVALS)  # consecutive: a freed keyval stays for the attributes still set
    _KEYVALS[keyval] = _Keyval(kind, copy_fn, delete_fn, nopython)
    return keyval


def _live_keyval(kind: str, keyval, call: str) -> _Keyval:
    key = _KEYVALS.get(keyval if isinstance(keyval, int) else None)
    if key is None or key.freed or key.kind != kind:
        raise MPIException(ERR_KEYVAL, f"{kind}.{call}({keyval!r}): not a key of {kind}.Create_keyval")
    return key


def free_keyval(kind: str, keyval) -> int:
    _live_keyval(kind, keyval, "Free_keyval").freed = True
    return KEYVAL_INVALID


def _call(function, obj, keyval: int, value, call: str):
    """``function(handle, keyval, value)`` on a handle made null after it."""
    handle = obj._attribute_handle()
    try:
        return function(handle, keyval, value)
    except Exception as exc:  # noqa: BLE001 - printed, then MPI's error, as mpi4py does
        traceback.print_exception(exc, file=sys.stderr)
        raise MPIException(ERR_OTHER, f"{call}: the attribute callback raised {type(exc).__name__}: {exc}") from exc
    finally:
        handle._make_null()


def _delete(obj, table: dict, keyval: int, call: str) -> None:
    key, value = table.pop(keyval)
    if key.delete_fn is not None:
        _call(key.delete_fn, obj, keyval, value, call)


class AttributeCalls:
    """Mixin of the classes with attributes: each gives ``_attr_kind``,
    ``_attributes()`` (the object's table, keyval -> (key, value)),
    ``_attribute_handle()`` and ``_make_null()``."""

    _attr_kind = ""

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython: bool = False) -> int:
        """A new attribute key for objects of this kind."""
        return create_keyval(cls._attr_kind, copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free the key; returns MPI.KEYVAL_INVALID."""
        return free_keyval(cls._attr_kind, keyval)

    def _user_attr(self, keyval: int):
        """The value under a user key, None if there is none."""
        key = _live_keyval(self._attr_kind, keyval, "Get_attr")
        entry = self._attributes().get(keyval)
        if entry is None:
            return None
        return int(entry[1]) if key.nopython else entry[1]

    def Set_attr(self, keyval: int, attrval) -> None:
        """Keep ``attrval`` under ``keyval`` (the old value's delete_fn runs)."""
        key = _live_keyval(self._attr_kind, keyval, "Set_attr")
        table = self._attributes()
        if keyval in table:
            _delete(self, table, keyval, "Set_attr")
        table[keyval] = (key, int(attrval) if key.nopython else attrval)

    def Delete_attr(self, keyval: int) -> None:
        """Remove the value under ``keyval`` (its delete_fn runs)."""
        _live_keyval(self._attr_kind, keyval, "Delete_attr")
        table = self._attributes()
        if keyval not in table:
            raise MPIException(ERR_KEYVAL, f"{self._attr_kind}.Delete_attr({keyval}): no value under this key")
        _delete(self, table, keyval, "Delete_attr")


def copy_attributes(old, new, call: str) -> None:
    """The attributes of ``new``, a duplicate of ``old``, by the copy functions."""
    table = new._attributes()
    for keyval, (key, value) in list(old._attributes().items()):
        if key.copy_fn is None:
            continue
        copied = value if key.copy_fn is True else _call(key.copy_fn, old, keyval, value, call)
        if copied is not NotImplemented:
            table[keyval] = (key, copied)


def delete_attributes(obj, call: str) -> None:
    """Delete every attribute of ``obj``, which is being freed (in reverse
    order of setting, as Open MPI does)."""
    table = obj._attributes()
    for keyval in reversed(list(table)):
        _delete(obj, table, keyval, call)
