"""Installing the stand-in on a rank.

``installed(comm)`` makes ``import mpi4py`` and ``from mpi4py import MPI``
give this package on the calling rank while the block runs, with
``MPI.COMM_WORLD`` on ``comm`` (the rank's simulator communicator), and
puts back whatever ``sys.modules`` held before (a real mpi4py included)
afterwards. ``simdist run`` does it for every rank of the simulator
backend; a function passed to ``World.run`` can do it too::

    def program(comm):
        with fake_backends.mpi4py.installed(comm):
            from mpi4py import MPI
            return MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank)

When the block ends normally, the engine first hands over every message
still queued (as MPI_Finalize would), so a rank that sends and returns at
once does not lose its messages.
"""

from __future__ import annotations

import contextlib
import sys

from simdist._errors import SimdistError

from . import MPI, _comm, _runtime


@contextlib.contextmanager
def installed(comm):
    """Run the block with ``mpi4py`` (and ``mpi4py.MPI``) importable as the
    stand-in on ``comm``; yields the MPI module. See the module docstring."""
    _runtime.check_world(comm)
    if _runtime.current is not None:
        raise SimdistError("the mpi4py stand-in is already installed on this rank")
    from . import rc

    package = sys.modules[__package__]
    saved = {name: mod for name, mod in sys.modules.items() if name == "mpi4py" or name.startswith("mpi4py.")}
    for name in saved:
        del sys.modules[name]
    rt = _runtime.current = _runtime.Runtime(comm)
    _comm.COMM_WORLD._state = _comm.world_state(rt)
    _comm.COMM_SELF._state = _comm.self_state(rt)
    rc.__init__()
    sys.modules["mpi4py"] = package
    sys.modules["mpi4py.MPI"] = MPI
    sys.modules["mpi4py.rc"] = rc
    ok = False
    try:
        yield MPI
        ok = True
    finally:
        try:
            if ok and not rt.finalized:
                rt.engine.flush()
        finally:
            _runtime.current = None
            rt.close()
            _comm.COMM_WORLD._state = None
            _comm.COMM_SELF._state = None
            for name in [n for n in sys.modules if n == "mpi4py" or n.startswith("mpi4py.")]:
                del sys.modules[name]
            sys.modules.update(saved)
