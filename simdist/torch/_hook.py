"""Attaching the simdist backend to torch.distributed when a process imports it.

``arm()`` runs as every simulator rank starts (``simdist._worker``). It
imports nothing of torch or of the simulated MPI: the worker is below both.
Once the program has imported ``torch.distributed``, ``_launch.attach``
registers the backend there, with Gloo's name and ``env://`` (see
``_launch``); ``_launch`` is named, not imported, here, as the worker must
not depend on the layers above it.

``autoload()`` is torch's entry point (group ``torch.backends``, which
``import torch`` loads in every process): it registers the ``simdist``
backend alone, so that processes another launcher started (torchrun,
``torch.multiprocessing.spawn``, a test harness) can ask for it by name and
join a hosted world. It never raises: torch would refuse to import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

_LAUNCH = "simdist.torch._launch"


def _attach(dist) -> None:
    importlib.import_module(_LAUNCH).attach(dist, _FINDER.simulated)


class _AttachOnImport(importlib.abc.MetaPathFinder):
    """Attaches to ``torch.distributed`` once it has been imported."""

    simulated = False  # a simulator rank's process: Gloo's name and env:// too

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _attach(module)

        spec.loader.exec_module = exec_module
        return spec


_FINDER = _AttachOnImport()


def arm(simulated: bool = True) -> None:
    """Attach now if torch.distributed is imported, or as soon as it is;
    ``simulated``: in a simulator rank."""
    _FINDER.simulated = _FINDER.simulated or simulated
    dist = sys.modules.get("torch.distributed")
    if dist is not None and hasattr(dist, "Backend"):
        _attach(dist)
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def autoload() -> None:
    """torch's entry point: the ``simdist`` backend by name in every process."""
    try:
        arm(simulated=False)
    except Exception as exc:  # torch must import whatever happens here
        import warnings

        warnings.warn(f"simdist could not register its torch.distributed backend: {exc}", stacklevel=1)
