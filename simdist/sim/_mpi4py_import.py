"""What ``import mpi4py`` gives on a simulator rank: the simulated mpi4py.

A simulator rank is one process of N, with no MPI library behind it: the
real mpi4py would start an MPI world of one rank there (``MPI_Init`` at
``from mpi4py import MPI``), in which every collective silently returns the
rank's own data. So each rank's process (``redirect``, called first thing
in the worker) makes ``mpi4py`` and ``mpi4py.MPI`` import as the stand-in
of ``fake_backends.mpi4py``, whose ``MPI.COMM_WORLD`` is bound to the
rank's world communicator of the current ``World.run`` call at its first
use in the run (``fake_backends.mpi4py._install.for_current_run``). The
other ``mpi4py.*`` names are looked up in the stand-in package as usual.

A worker forked from a driver that had already imported the real mpi4py
(``from mpi4py import MPI`` at the top of a test file or of the module of
a factory: ``MPI_Init`` ran in the driver, as a world of one) inherits it.
It must never be used there: the worker drops it from ``sys.modules`` and
rebinds every reference to it it can find -- to the ``mpi4py`` package,
``mpi4py.MPI``, or an object of it (``MPI.COMM_WORLD``, ``MPI.SUM``,
``MPI.DOUBLE``, a class) -- to the stand-in's of the same name: in every
module's globals, in the default arguments and closures of its functions,
in its classes' attributes and their methods' defaults. Such an object
held anywhere else (a container, an attribute of an object made in the
driver) cannot be found, and stays the driver's world of one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

#: The real mpi4py's modules a forked worker inherited: kept alive, so that
#: nothing of the driver's MPI is ever torn down in the worker.
_inherited: list = []

#: The names imported as the stand-in's modules.
STAND_INS = {"mpi4py": "fake_backends.mpi4py", "mpi4py.MPI": "fake_backends.mpi4py.MPI"}


class _Loader(importlib.abc.Loader):
    """Gives the already imported ``module`` under another name, leaving
    its own ``__spec__`` (which its relative imports need) as it was."""

    def __init__(self, module):
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec):
        return self._module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set it to the alias's


class StandInFinder(importlib.abc.MetaPathFinder):
    """Finds ``mpi4py`` and ``mpi4py.MPI`` as the stand-in's modules."""

    def find_spec(self, name, path=None, target=None):
        if name not in STAND_INS:
            return None
        return importlib.machinery.ModuleSpec(name, _Loader(importlib.import_module(STAND_INS[name])))


def redirect() -> None:
    """Make ``import mpi4py`` give the stand-in in this process, and replace
    a real mpi4py inherited from the driver (see the module docstring)."""
    if not any(isinstance(finder, StandInFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, StandInFinder())
    names = [name for name in sys.modules if name == "mpi4py" or name.startswith("mpi4py.")]
    inherited = {name: sys.modules.pop(name) for name in names}
    inherited = {name: mod for name, mod in inherited.items() if not _is_stand_in(mod)}
    if inherited:
        _inherited.append(inherited)
    if "mpi4py.MPI" in inherited:  # without it, the real package is inert: a later import finds the stand-in
        _replace(inherited)


def _is_stand_in(module) -> bool:
    return not str(getattr(module, "__name__", "")).startswith("mpi4py")


def _replace(inherited: dict) -> None:
    substitutes = _substitutes(inherited)
    # the real package's Python modules, held by someone, run on the stand-in too
    modules = [*sys.modules.values(), *(m for n, m in inherited.items() if n != "mpi4py.MPI")]
    for module in modules:
        namespace = getattr(module, "__dict__", None)
        name = getattr(module, "__name__", None)
        if not isinstance(namespace, dict) or not isinstance(name, str) or name.startswith("fake_backends.mpi4py"):
            continue
        _rebind(namespace, substitutes)
        for value in list(namespace.values()):
            if isinstance(value, types.FunctionType):
                _rebind_function(value, substitutes)
            elif isinstance(value, type) and value.__module__ == name:
                _rebind_class(value, substitutes)


def _rebind(namespace: dict, substitutes: dict) -> None:
    for key, value in list(namespace.items()):
        substitute = substitutes.get(id(value))
        if substitute is not None:
            namespace[key] = substitute


def _rebind_function(fn, substitutes: dict) -> None:
    """The real objects in ``fn``'s default arguments and closure."""
    if fn.__defaults__ and any(id(v) in substitutes for v in fn.__defaults__):
        fn.__defaults__ = tuple(substitutes.get(id(v), v) for v in fn.__defaults__)
    if fn.__kwdefaults__:
        _rebind(fn.__kwdefaults__, substitutes)
    for cell in fn.__closure__ or ():
        try:
            substitute = substitutes.get(id(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
        if substitute is not None:
            cell.cell_contents = substitute


def _rebind_class(cls: type, substitutes: dict) -> None:
    """The real objects in ``cls``'s attributes and its methods' defaults."""
    for key, value in list(vars(cls).items()):
        substitute = substitutes.get(id(value))
        if substitute is not None:
            setattr(cls, key, substitute)
        elif isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, types.FunctionType):
            _rebind_function(value, substitutes)


def _substitutes(inherited: dict) -> dict:
    """id(real object) -> the stand-in's, for the real package, its MPI
    module and the objects of that module (all kept alive by ``inherited``,
    so their ids are theirs)."""
    package = importlib.import_module(STAND_INS["mpi4py"])
    MPI = importlib.import_module(STAND_INS["mpi4py.MPI"])
    found: dict = {}
    if "mpi4py" in inherited:
        found[id(inherited["mpi4py"])] = package
    real = inherited.get("mpi4py.MPI")
    if real is None:
        return found
    found[id(real)] = MPI
    for name, value in vars(real).items():
        if name.startswith("__") or not _of_mpi4py(value):
            continue
        try:
            found[id(value)] = getattr(MPI, name)
        except Exception:  # not simulated: the stand-in refuses the name
            continue
    return found


def _of_mpi4py(value) -> bool:
    """An object of the real mpi4py.MPI (a handle, a class, a function), not
    a plain int or str that other modules may hold too."""
    return type(value).__module__ == "mpi4py.MPI" or getattr(value, "__module__", None) == "mpi4py.MPI"
