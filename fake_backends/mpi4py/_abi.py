"""MPI 5's ABI queries, answered as mpi4py answers them over an MPI library
without the standard ABI (Open MPI 5): no ABI version, and the sizes and
support of the datatypes the stand-in has."""

from __future__ import annotations

from ._datatypes import TYPES
from ._hints import Info

_FORTRAN_SIZES = ("logical", "integer", "real", "double_precision")
_FORTRAN_CLASSES = (("logical", (1, 2, 4, 8, 16)), ("integer", (1, 2, 4, 8, 16)), ("real", (2, 4, 8, 16)),
                    ("complex", (4, 8, 16, 32)), ("double_complex", ("",)))


def Get_abi_version() -> tuple[int, int]:
    """(-1, -1): no standard ABI, as with Open MPI 5."""
    return -1, -1


def Get_abi_info() -> Info:
    """The sizes of MPI_Aint, MPI_Count and MPI_Offset in bytes."""
    return Info.Create({f"mpi_{name}_size": str(TYPES[name.upper()].Get_size())
                        for name in ("aint", "count", "offset")})


def _supported(name: str) -> bool:
    datatype = TYPES.get(name.upper())
    return bool(datatype) and datatype.Get_size() > 0


def Get_abi_fortran_info() -> Info:
    """The sizes of the default Fortran types, and which sized ones exist."""
    items = {f"mpi_{name}_size": str(TYPES[name.upper()].Get_size()) for name in _FORTRAN_SIZES}
    for kind, sizes in _FORTRAN_CLASSES:
        for size in sizes:
            items[f"mpi_{kind}{size}_supported"] = "true" if _supported(f"{kind}{size}") else "false"
    return Info.Create(items)
