"""What a check covers: the collectives, ops and dtypes a user selects, and
the collectives a factory says it implements.

Both ``simdist check``'s sweep and the property suite narrow to a *focus*:
``--collectives``, ``--ops`` and ``--dtypes`` (names; None: all), and, for a
factory that implements only some collectives, those. A factory says so
with an attribute ``implements`` on the callable that ``MODULE:FACTORY``
names (a class attribute when ``FACTORY`` is a class, or
``make.implements = {"allreduce"}`` after ``def make``): the collectives it
implements itself, by the names of :data:`SWEEP_COLLECTIVES`. Without it,
every collective is checked (a factory that delegates the rest to its base
passes on them). A factory whose communicator carries dtypes beyond the
contract's (torch's: bfloat16) names them in ``extra_dtypes``, and the
sweep makes their rows too.
"""

from __future__ import annotations

import numpy as np

from .._arguments import DTYPES
from .._bfloat16 import NAME as BFLOAT16, dtype_named
from .._errors import InvalidType, InvalidValue, SimdistError
from .._reduction import ops_for
from ._cases import SWEEP_COLLECTIVES
from ._ranks import load_factory

__all__ = ["OPS", "EXTRA_DTYPES", "select_collectives", "select_ops", "select_dtypes", "extra_dtypes", "implemented",
           "parse_sizes"]

#: The dtypes beyond the contract's that a sweep knows, by name: a factory
#: whose communicator carries some says so with ``extra_dtypes``.
EXTRA_DTYPES = (BFLOAT16,)

#: Every reduction op of the contract: a float's, then the integers' own.
OPS = tuple(dict.fromkeys((*ops_for(np.dtype("float64")), *ops_for(np.dtype("int64")))))


def _listed(value, what: str) -> list:
    names = [value] if isinstance(value, str) else list(value)
    if not names:
        raise InvalidValue(f"{what}={value!r}: none given")
    return names


def _select(value, known: tuple, what: str) -> tuple:
    """The names of ``known`` that ``value`` (a name or names) lists, in ``known``'s order (None: all)."""
    if value is None:
        return known
    names = _listed(value, what)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidValue(f"{what}={value!r}: {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
    return tuple(n for n in known if n in names)


def select_collectives(collectives, what: str = "collectives") -> tuple:
    """The collectives named, in report order (None: all)."""
    return _select(collectives, SWEEP_COLLECTIVES, what)


def select_ops(ops, what: str = "ops") -> tuple:
    """The reduction ops named, in :data:`OPS` order (None: all)."""
    return _select(ops, OPS, what)


def select_dtypes(dtypes, what: str = "dtypes", extra: tuple = ()) -> tuple:
    """The dtypes named, in the contract's order then ``extra``'s (the
    names of :data:`EXTRA_DTYPES` a backend carries besides); None: all."""
    known = (*DTYPES, *map(dtype_named, extra))
    if dtypes is None:
        return known
    names = _listed(dtypes, what)
    try:
        wanted = {dtype_named(d) if isinstance(d, str) else np.dtype(d) for d in names}
    except TypeError as exc:
        raise InvalidValue(f"{what}={dtypes!r}: {exc}") from None
    unknown = [str(d) for d in wanted if d not in known]
    if unknown:
        beyond = [d for d in unknown if d in EXTRA_DTYPES]
        raise InvalidValue(f"{what}={dtypes!r}: {', '.join(unknown)} not among the contract's dtypes "
                           f"{', '.join(map(str, DTYPES))}"
                           + (f"; {', '.join(beyond)} only where a backend carries it (torch-gloo, torch-nccl)"
                              if beyond else ""))
    return tuple(d for d in known if d in wanted)


def extra_dtypes(factory: str | None) -> tuple:
    """The dtypes beyond the contract's that ``factory`` says its
    communicator carries (its callable's attribute ``extra_dtypes``, names
    of :data:`EXTRA_DTYPES`), or ()."""
    if factory is None:
        return ()
    declared = getattr(load_factory(factory), "extra_dtypes", ())
    names = [declared] if isinstance(declared, str) else list(declared)
    unknown = [n for n in names if n not in EXTRA_DTYPES]
    if unknown:
        raise InvalidValue(f"{factory}.extra_dtypes={declared!r}: {', '.join(map(repr, unknown))}; the dtypes "
                           f"a sweep knows beyond the contract's are {', '.join(EXTRA_DTYPES)}")
    return tuple(names)


def implemented(factory: str | None) -> tuple | None:
    """The collectives ``factory`` (``"module:callable"``) says it implements,
    in report order, or None when it does not say (or there is no factory)."""
    if factory is None:
        return None
    declared = getattr(load_factory(factory), "implements", None)
    if declared is None:
        return None
    if isinstance(declared, str) or not hasattr(declared, "__iter__"):
        raise InvalidType(f"{factory}.implements={declared!r} must be a set of collective names, "
                          f"e.g. {{'allreduce'}}")
    return select_collectives(list(declared), what=f"{factory}.implements")


#: Backends named by a word that are a factory on the simulator's ranks:
#: torch's, each rank making a process group of the real backend
#: (:mod:`simdist.torch.check`).
NAMED_FACTORIES = {"torch-gloo": "simdist.torch.check:gloo", "torch-nccl": "simdist.torch.check:nccl"}


def named_backend(backend: str, factory: str | None, what: str = "backend") -> tuple[str, str | None]:
    """``(world backend, factory)`` for ``backend``: a name of
    :data:`NAMED_FACTORIES` is the simulator's world and that factory (and
    raises :class:`simdist.SimdistError` saying why where the backend
    cannot run here: no GPU for NCCL); any other backend is returned as is."""
    if backend not in NAMED_FACTORIES:
        return backend, factory
    if factory is not None:
        raise InvalidValue(f"{what}={backend!r} is a factory of its own ({NAMED_FACTORIES[backend]}); "
                           f"it takes no other factory ({factory!r})")
    try:
        from simdist.torch.check import unavailable
    except ImportError as exc:
        raise SimdistError(f"{what}={backend!r} needs PyTorch: pip install 'simdist[torch]' ({exc})") from None
    reason = unavailable(backend)
    if reason:
        raise SimdistError(f"{backend} skipped: {reason}")
    return "sim", NAMED_FACTORIES[backend]


def parse_sizes(text: str, option: str = "-n") -> list[int]:
    """``"4"``, ``"2-5"``, ``"2,3,5,8"`` or a mix (``"2-4,8"``) as a list of
    sizes >= 1, in the order given, each once; ValueError with the message
    to print otherwise."""
    sizes: list[int] = []
    try:
        for part in str(text).split(","):
            low, dash, high = part.strip().partition("-")
            sizes += range(int(low), int(high) + 1) if dash else [int(low)]
    except ValueError:
        raise ValueError(f"{option} {text!r}: give a size (4), a range (2-5) or a list (2,3,5,8)") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"{option} {text!r}: sizes must be >= 1")
    return list(dict.fromkeys(sizes))
