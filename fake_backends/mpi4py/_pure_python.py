"""Where the stand-in's other ``mpi4py.*`` modules come from.

The stand-in replaces only what mpi4py compiles (``mpi4py.MPI``, and the
package's ``__init__`` that loads it). When the real mpi4py is installed,
its pure-Python modules -- ``mpi4py.bench``, ``mpi4py.run``,
``mpi4py.__main__``, ``mpi4py.typing``, ``mpi4py.util.*``,
``mpi4py.futures`` -- are imported from its directory, unchanged: the
stand-in package's ``__path__`` is its own directory first (so
``mpi4py.MPI`` is always the stand-in's), then the real package's. Their
``from . import MPI`` and ``from .. import MPI`` give the stand-in's MPI.

Without the real mpi4py, the second directory is ``_without_mpi4py``:
``mpi4py.util`` and ``mpi4py.futures`` refuse there, naming what to use.

One package object, two names: the stand-in is ``fake_backends.mpi4py``
and, on a rank, ``mpi4py``. A real module's ``from .. import futures``
looks ``futures`` up as an attribute of the package and, when it is not
there yet, imports it under the package's own ``__name__`` -- a second
copy, ``fake_backends.mpi4py.futures``, that would replace the package's
attribute. So the package's ``__getattr__`` (``submodule``) imports such a
module as ``mpi4py.<name>`` whenever the stand-in is ``mpi4py``: one copy.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys

#: The directory of the modules given when the real mpi4py is not installed.
WITHOUT_MPI4PY = os.path.join(os.path.dirname(__file__), "_without_mpi4py")


def real_package_dir() -> str | None:
    """The directory of the installed mpi4py package, found without importing
    it (importing it would load its compiled MPI); None when not installed."""
    spec = importlib.machinery.PathFinder.find_spec("mpi4py", sys.path)
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = list(spec.submodule_search_locations)[0]
    return directory if os.path.isfile(os.path.join(directory, "bench.py")) else None


def search_path(own: list) -> list:
    """The stand-in package's ``__path__``: ``own`` first, then the real
    package's directory, or the refusing modules' when it is absent."""
    real = real_package_dir()
    return [*own, real if real is not None else WITHOUT_MPI4PY]


def _module_names(directory: str) -> set:
    names = set()
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if entry.endswith(".py"):
            names.add(entry[:-3])
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            names.add(entry)
    return names


def real_only_names(path: list) -> set:
    """The module names of the package's later directories that its first
    (the stand-in's own) does not have."""
    own = _module_names(path[0])
    return {name for directory in path[1:] for name in _module_names(directory)} - own


def submodule(package, name: str):
    """``mpi4py.<name>`` for the stand-in ``package``'s ``__getattr__`` (see
    the module docstring); AttributeError where the import system should
    go on as usual."""
    if name not in package.__dict__.setdefault("_REAL_ONLY", real_only_names(package.__path__)) or \
            sys.modules.get("mpi4py") is not package:
        raise AttributeError(f"module 'mpi4py' has no attribute {name!r}")
    return importlib.import_module(f"mpi4py.{name}")
