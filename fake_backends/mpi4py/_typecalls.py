"""The calls of ``MPI.Datatype`` on type maps (a mixin of Datatype): the
constructors of derived datatypes, Commit and Free, the extents and sizes,
and the decoding calls (Get_envelope, Get_contents, decode).

A derived datatype's type map (``_derived.TypeMap``) lives in ``_MAPS``
under the datatype's handle (``_id``), so that every handle on it (as
``MPI.Datatype(dt)``) sees it; ``Free`` removes it, and any later use of
the datatype raises ``MPI.Exception(MPI.ERR_TYPE)``, as MPI says.
"""

from __future__ import annotations

import operator

from . import _derived, _handleleaks
from ._attributes import copy_attributes
from ._derived import TypeMap, basic_map, check_type
from ._errors import ERR_TYPE, Exception as MPIException
from ._handles import predefined

_INT_MAX = 2**31 - 1
_MAPS: dict = {}  # handle of a derived datatype -> its TypeMap
_BASIC: dict = {}  # key of a predefined datatype -> its TypeMap

_COMBINER_NAMES = {
    _derived.NAMED: "NAMED", _derived.DUP: "DUP", _derived.CONTIGUOUS: "CONTIGUOUS", _derived.VECTOR: "VECTOR",
    _derived.HVECTOR: "HVECTOR", _derived.INDEXED: "INDEXED", _derived.HINDEXED: "HINDEXED",
    _derived.INDEXED_BLOCK: "INDEXED_BLOCK", _derived.HINDEXED_BLOCK: "HINDEXED_BLOCK",
    _derived.STRUCT: "STRUCT", _derived.SUBARRAY: "SUBARRAY", _derived.DARRAY: "DARRAY",
    _derived.RESIZED: "RESIZED", _derived.F90_INTEGER: "F90_INTEGER", _derived.F90_REAL: "F90_REAL",
    _derived.F90_COMPLEX: "F90_COMPLEX",
}
# Fortran 90 parameterized types: the smallest predefined one of the range (and precision) asked
_F90_INTEGER = ((2, "INTEGER1"), (4, "INTEGER2"), (9, "INTEGER4"), (18, "INTEGER8"))
_F90_REAL = ((6, 37, "REAL4"), (15, 307, "REAL8"), (33, 4931, "REAL16"))
_F90_COMPLEX = ((6, 37, "COMPLEX8"), (15, 307, "COMPLEX16"))


def _decode_params(combiner: int, ints: list, addrs: list, types: list) -> dict:
    """mpi4py's ``decode`` parameters of a combiner's contents."""
    if combiner == _derived.CONTIGUOUS:
        return {"count": ints[0]}
    if combiner == _derived.VECTOR:
        return {"count": ints[0], "blocklength": ints[1], "stride": ints[2]}
    if combiner == _derived.HVECTOR:
        return {"count": ints[0], "blocklength": ints[1], "stride": addrs[0]}
    n = ints[0] if ints else 0
    if combiner == _derived.INDEXED:
        return {"blocklengths": ints[1:n + 1], "displacements": ints[n + 1:]}
    if combiner == _derived.HINDEXED:
        return {"blocklengths": ints[1:n + 1], "displacements": addrs}
    if combiner == _derived.INDEXED_BLOCK:
        return {"blocklength": ints[1], "displacements": ints[2:]}
    if combiner == _derived.HINDEXED_BLOCK:
        return {"blocklength": ints[1], "displacements": addrs}
    if combiner == _derived.STRUCT:
        return {"blocklengths": ints[1:n + 1], "displacements": addrs, "datatypes": types}
    if combiner == _derived.SUBARRAY:
        return {"sizes": ints[1:n + 1], "subsizes": ints[n + 1:2 * n + 1], "starts": ints[2 * n + 1:3 * n + 1],
                "order": ints[3 * n + 1]}
    if combiner == _derived.DARRAY:
        n = ints[2]
        return {"size": ints[0], "rank": ints[1], "gsizes": ints[3:n + 3], "distribs": ints[n + 3:2 * n + 3],
                "dargs": ints[2 * n + 3:3 * n + 3], "psizes": ints[3 * n + 3:4 * n + 3], "order": ints[4 * n + 3]}
    if combiner == _derived.RESIZED:
        return {"lb": addrs[0], "extent": addrs[1]}
    if combiner == _derived.F90_INTEGER:
        return {"r": ints[0]}
    if combiner in (_derived.F90_REAL, _derived.F90_COMPLEX):
        return {"p": ints[0], "r": ints[1]}
    return {}


_PREDEFINED_COMBINERS = frozenset((_derived.NAMED, _derived.F90_INTEGER, _derived.F90_REAL, _derived.F90_COMPLEX))


class _Query:
    """A property of the datatype's type map (``field``), read directly for
    a live handle; for any other, ``fallback(datatype)`` makes the guarded
    MPI call, which gives the answer or raises through the error handler."""

    def __init__(self, field: str, fallback):
        self._read, self._fallback = operator.attrgetter(field), fallback

    def __get__(self, datatype, owner=None):
        if datatype is None:
            return self
        tm = _MAPS.get(datatype._id) or _BASIC.get(datatype._id)  # a predefined handle's ``_id`` is its key
        return self._fallback(datatype) if tm is None else self._read(tm)


def _recreate(basetype, combiner: str, params: dict):
    """A new committed datatype from mpi4py's decoded form (what a pickled one loads as)."""
    return getattr(basetype, f"Create_{combiner.lower()}")(**params).Commit()


class DerivedCalls:
    """Mixin of Datatype: see the module docstring. The class provides
    ``_id`` (the handle), ``_key`` (the predefined datatype's key) and
    ``_predefined()``."""

    # -- the type map ----------------------------------------------------------------------
    def _typemap(self, call: str = "use") -> TypeMap:
        tm = _MAPS.get(self._id)
        if tm is not None:
            return tm
        if self._predefined():
            tm = _BASIC.get(self._key)
            if tm is None:
                tm = _BASIC[self._key] = basic_map(self)
            return tm
        return check_type(None, self._name or "a datatype", call)

    def _is_derived(self) -> bool:
        return self._id in _MAPS

    @classmethod
    def _new(cls, tm: TypeMap):
        """A new derived datatype of type map ``tm``; its contents keep their
        own handles on the derived datatypes it was made of (freeing those
        leaves it whole), and the predefined ones as given (never freed)."""
        combiner, ints, addrs, types = tm.contents
        tm.contents = (combiner, ints, addrs, [t._alias() if t._id in _MAPS else t for t in types])
        datatype = cls()
        datatype._id, datatype._name, datatype._key = object(), "", "DERIVED"
        datatype._dtype = None
        _MAPS[datatype._id] = tm
        tm.handles += 1
        _handleleaks.handle_made(datatype._id, "datatype", datatype)
        return datatype

    def _alias(self):
        """Another handle on this datatype, freed on its own (what Get_contents returns)."""
        alias = type(self)(self)
        tm = _MAPS.get(self._id)
        if tm is not None:
            alias._id = object()
            _MAPS[alias._id] = tm
            tm.handles += 1
        return alias

    def _derived_dtype(self):
        """The numpy dtype of a derived datatype's packed element (``TypeMap.packed_dtype``)."""
        return self._typemap("dtype").packed_dtype()

    # -- constructors ------------------------------------------------------------------------
    def Dup(self):
        """A new datatype of the same type map (not equal to this one, as in MPI)."""
        tm = _derived.dup(self._typemap("Dup"), self)
        tm.committed = True
        dup = self._new(tm)
        # a Dup of a predefined datatype keeps its name and key: it pickles as a Dup of that one
        dup._name, dup._dtype, dup._key = self._name, self._dtype, self._key
        if self._has_attributes():
            copy_attributes(self, dup, "Datatype.Dup")
        return dup

    Create_dup = Dup

    def Create_contiguous(self, count: int):
        if count > _INT_MAX:  # MPI 3.1 has int counts: Open MPI 5 builds a struct of two parts, as here
            part, rest = divmod(count, _INT_MAX)
            whole = self.Create_vector(part, _INT_MAX, _INT_MAX)
            tail = self.Create_contiguous(rest)
            joined = type(self).Create_struct([1, 1], [0, part * _INT_MAX * self.Get_extent()[1]], [whole, tail])
            whole.Free()
            tail.Free()
            return joined
        return self._new(_derived.contiguous(self._typemap("Create_contiguous"), self, count))

    def Create_vector(self, count: int, blocklength: int, stride: int):
        return self._new(_derived.vector(self._typemap("Create_vector"), self, count, blocklength, stride, False))

    def Create_hvector(self, count: int, blocklength: int, stride: int):
        return self._new(_derived.vector(self._typemap("Create_hvector"), self, count, blocklength, stride, True))

    def Create_indexed(self, blocklengths, displacements):
        tm = self._typemap("Create_indexed")
        return self._new(_derived.indexed(tm, self, blocklengths, displacements, False, None))

    def Create_hindexed(self, blocklengths, displacements):
        tm = self._typemap("Create_hindexed")
        return self._new(_derived.indexed(tm, self, blocklengths, displacements, True, None))

    def Create_indexed_block(self, blocklength: int, displacements):
        tm = self._typemap("Create_indexed_block")
        return self._new(_derived.indexed(tm, self, None, displacements, False, blocklength))

    def Create_hindexed_block(self, blocklength: int, displacements):
        tm = self._typemap("Create_hindexed_block")
        return self._new(_derived.indexed(tm, self, None, displacements, True, blocklength))

    @classmethod
    def Create_struct(cls, blocklengths, displacements, datatypes):
        types = list(datatypes)
        olds = [t._typemap("Create_struct") for t in types]
        return cls._new(_derived.struct(olds, types, blocklengths, displacements))

    def Create_subarray(self, sizes, subsizes, starts, order: int = _derived.ORDER_C):
        tm = self._typemap("Create_subarray")
        return self._new(_derived.subarray(tm, self, sizes, subsizes, starts, order))

    def Create_darray(self, size: int, rank: int, gsizes, distribs, dargs, psizes, order: int = _derived.ORDER_C):
        tm = self._typemap("Create_darray")
        return self._new(_derived.darray(tm, self, size, rank, gsizes, distribs, dargs, psizes, order))

    def Create_resized(self, lb: int, extent: int):
        return self._new(_derived.resized(self._typemap("Create_resized"), self, lb, extent))

    @classmethod
    def _f90(cls, combiner: int, ints: list, table, call: str):
        for *limits, key in table:
            if all(want <= limit for want, limit in zip(ints, limits)):
                base = predefined(key)
                datatype = base._new(_derived.f90(base._typemap(call), combiner, ints))
                datatype._name, datatype._dtype, datatype._key = base._name, base._dtype, base._key
                return datatype
        raise MPIException(ERR_TYPE, f"Datatype.{call}{tuple(ints)}: no predefined datatype has that range")

    @classmethod
    def Create_f90_integer(cls, r: int):
        return cls._f90(_derived.F90_INTEGER, [int(r)], _F90_INTEGER, "Create_f90_integer")

    @classmethod
    def Create_f90_real(cls, p: int, r: int):
        return cls._f90(_derived.F90_REAL, [int(p), int(r)], _F90_REAL, "Create_f90_real")

    @classmethod
    def Create_f90_complex(cls, p: int, r: int):
        return cls._f90(_derived.F90_COMPLEX, [int(p), int(r)], _F90_COMPLEX, "Create_f90_complex")

    # -- life ----------------------------------------------------------------------------------
    def Commit(self):
        self._typemap("Commit").committed = True
        return self

    def _free_map(self) -> None:
        tm = _MAPS.pop(self._id, None)
        if tm is None:
            return
        _handleleaks.handle_freed(self._id)
        tm.handles -= 1
        if not tm.handles:  # the last handle on it: its contents' handles on derived datatypes go too
            for part in tm.contents[3]:
                part._free_map()

    # -- sizes and extents ----------------------------------------------------------------------
    def Get_size(self) -> int:
        if not self:
            raise MPIException(ERR_TYPE, "Datatype.Get_size of MPI.DATATYPE_NULL")
        if self._predefined():
            return 0 if self._dtype is None else self._dtype.itemsize
        return self._typemap("Get_size").size

    def Get_extent(self) -> tuple[int, int]:
        if self._predefined():
            return 0, self.Get_size()
        tm = self._typemap("Get_extent")
        return tm.lb, tm.extent

    def Get_true_extent(self) -> tuple[int, int]:
        if self._predefined():
            return 0, self.Get_size()
        lb, ub = self._typemap("Get_true_extent").true_bounds()
        return lb, ub - lb

    # The properties read the type map of a live handle directly (``_Query``).
    size = _Query("size", lambda dt: dt.Get_size())
    extent = _Query("extent", lambda dt: dt.Get_extent()[1])
    lb = _Query("lb", lambda dt: dt.Get_extent()[0])
    ub = _Query("ub", lambda dt: sum(dt.Get_extent()))
    true_extent = _Query("true_extent", lambda dt: dt.Get_true_extent()[1])
    true_lb = _Query("true_lb", lambda dt: dt.Get_true_extent()[0])
    true_ub = _Query("true_ub", lambda dt: sum(dt.Get_true_extent()))

    # -- decoding ------------------------------------------------------------------------------
    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        return self._typemap("Get_envelope").envelope

    def Get_contents(self) -> tuple[list, list, list, list]:
        tm = self._typemap("Get_contents")
        combiner, ints, addrs, types = tm.contents
        if combiner == _derived.NAMED:
            raise MPIException(ERR_TYPE, f"Datatype.Get_contents of {self._name}, a named datatype")
        return list(ints), list(addrs), [], [t._alias() for t in types]

    def decode(self):
        """``(basetype, combiner name, parameters)``, as mpi4py's: one new
        handle per datatype of the contents, the basetype being the only one
        if there is one (a struct of one block lists it), else null."""
        combiner, ints, addrs, types = self._typemap("decode").contents
        if combiner == _derived.NAMED:
            return self, "NAMED", {}
        handles = [t._alias() for t in types]
        base = handles[0] if len(handles) == 1 else type(self)()
        return base, _COMBINER_NAMES[combiner], _decode_params(combiner, ints, addrs, handles)

    envelope = _Query("envelope", lambda dt: dt.Get_envelope())
    contents = property(lambda self: self.Get_contents())  # the guarded call: errors go through the handler
    combiner = _Query("combiner", lambda dt: dt.Get_envelope()[-1])
    is_named = property(lambda self: self.combiner == _derived.NAMED)

    @property
    def is_predefined(self) -> bool:
        tm = _MAPS.get(self._id) or _BASIC.get(self._id)  # a live handle (see ``_Query``), never null
        if tm is None:
            return not self or self.combiner in _PREDEFINED_COMBINERS
        return tm.combiner in _PREDEFINED_COMBINERS

    def _reduce_derived(self):
        """How a derived datatype pickles: its decoded form, recreated (as mpi4py does)."""
        base, combiner, params = self.decode()
        return _recreate, (base, combiner, params)
