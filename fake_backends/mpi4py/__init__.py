"""A stand-in for the ``mpi4py`` package on simdist's simulator.

``simdist run -n N prog.py`` (simulator backend) installs this package as
``mpi4py`` on every rank, so that ``from mpi4py import MPI`` in an unmodified
mpi4py program gives a simulated MPI: ``MPI.COMM_WORLD`` is the rank's
simulator communicator, collectives are simdist's (deterministic, checked
for mismatches), and point-to-point messages go through a progress engine
over the simulator's rings. See ``fake_backends.mpi4py.MPI`` for what is
supported and what differs, and ``fake_backends.mpi4py._p2p`` for the
message protocol.

Modules: ``MPI`` (the public names), ``_comm`` (communicators, point to
point), ``_collectives`` and ``_objects`` (buffer and object collectives),
``_p2p`` (protocol and progress engine), ``_requests`` (Status, Request,
Message), ``_buffers`` (buffer specifications), ``_datatypes``, ``_ops``,
``_errors``, ``_install`` and ``_runtime`` (installing, for a block or for
the rest of a ``World.run`` call), ``_names`` (what is not supported).

On a simulator rank, ``import mpi4py`` gives this package even without
``installed()`` (``simdist.sim``'s import redirection), and ``MPI.COMM_WORLD``
is bound to the rank's world at its first use in each run.

This package itself is what a program sees as ``mpi4py``: ``rc``,
``__version__``, ``get_config()``. Its other modules (``mpi4py.bench``,
``mpi4py.util.pkl5``, ``mpi4py.futures``, ...) are the real mpi4py's, when
it is installed (``_pure_python``).
"""

from __future__ import annotations

from ._errors import MPIAbort, unsupported
from ._install import installed, installed_for_run
from ._pure_python import search_path, submodule

__path__ = search_path(__path__)  # the real mpi4py's pure-Python modules after the stand-in's


def __getattr__(name: str):
    """``mpi4py.bench``, ``mpi4py.futures``, ...: imported as ``mpi4py.<name>`` (``_pure_python``)."""
    import sys

    return submodule(sys.modules[__name__], name)

__all__ = ["MPIAbort", "installed", "installed_for_run", "rc", "get_config", "get_include"]

#: The mpi4py version whose API the stand-in follows.
__version__ = "4.1.2"
#: True here, absent in the real mpi4py: a program may check whether it runs on the simulator.
simulated = True


class Rc:
    """``mpi4py.rc``: runtime options. Every option of mpi4py is accepted;
    only ``errors`` changes anything here (the error handler of new
    communicators: ``_errhandlers``); MPI is always initialized and objects
    are always reduced in rank order."""

    initialize = True
    threads = True
    thread_level = "multiple"
    finalize = None
    fast_reduce = True
    recv_mprobe = True
    irecv_bufsz = 32768
    errors = "exception"

    def __init__(self, **kwargs):
        for name in list(vars(self)):
            delattr(self, name)
        self(**kwargs)

    def __setattr__(self, name, value):
        if not hasattr(type(self), name):
            raise TypeError(f"object has no attribute {name!r}")
        super().__setattr__(name, value)

    def __call__(self, **kwargs):
        for key in kwargs:
            if not hasattr(type(self), key):
                raise TypeError(f"unexpected argument {key!r}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __repr__(self):
        return "<mpi4py.rc>"


rc = Rc()


def get_config() -> dict:
    """MPI build information: none (as mpi4py 4 returns by default)."""
    return {}


def get_include():
    raise unsupported("mpi4py.get_include()", "there are no C headers: the simulated MPI has no C API")


def profile(name, *, path=None):
    raise unsupported("mpi4py.profile()", "the simulated MPI has no profiling interface")
