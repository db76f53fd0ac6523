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
once does not lose its messages. A run may hold several blocks, one after
the other (``_runtime`` keeps their messages apart).

``installed_for_run(comm)`` installs the stand-in for the rest of the current
``World.run`` call instead (``simdist.mpi4py_comm``; and the first use of
``MPI.COMM_WORLD`` in a simulator rank's run, see ``for_current_run``): it
is removed, after the same flush, when the run's function returns.
"""

from __future__ import annotations

import contextlib
import sys

from simdist._errors import SimdistError

from . import MPI, _comm, _misuse, _runtime, _thread_failures


def _mpi4py_names() -> list:
    """The names of ``sys.modules`` that are mpi4py's (one scan per install and remove)."""
    return [name for name in sys.modules if name.startswith("mpi4py") and (name == "mpi4py" or name[6] == ".")]


class _Installation:
    """The stand-in installed on ``comm`` until ``remove``; see the module docstring."""

    def __init__(self, comm):
        _runtime.check_world(comm)
        if _runtime.current is not None:
            raise SimdistError("the mpi4py stand-in is already installed on this rank")
        from . import rc

        package = sys.modules[__package__]
        self.saved = {name: sys.modules.pop(name) for name in _mpi4py_names()}
        self.rt = _runtime.current = _runtime.Runtime(comm)
        _misuse.start()
        _comm.COMM_WORLD._state = _comm.world_state(self.rt)
        _comm.COMM_SELF._state = _comm.self_state(self.rt)
        rc.__init__()
        _thread_failures.arm()
        sys.modules["mpi4py"] = package
        sys.modules["mpi4py.MPI"] = MPI
        sys.modules["mpi4py.rc"] = rc

    def end(self, returned: bool, raised: BaseException | None = None) -> None:
        """The program ended: it ``returned``, or raised ``raised``. Remove
        the installation (flushing only after a normal end without
        ``Comm.Abort``); then, if the rank called ``Comm.Abort`` and the
        program caught what it raised, raise it again: MPI_Abort never
        returns."""
        aborted = self.rt.aborted
        self.remove(returned and aborted is None)
        if aborted is not None and raised is not aborted:
            raise aborted from None

    def remove(self, ended_normally: bool) -> None:
        """Flush the engine if the program ended normally (as MPI_Finalize
        would), then put back what ``sys.modules`` held."""
        rt = self.rt
        try:
            if ended_normally and not rt.finalized:
                rt.engine.flush()
                _misuse.at_end(rt)
            elif not ended_normally:
                _misuse.at_failure()
        finally:
            _thread_failures.disarm()
            _runtime.current = None
            rt.close()
            _comm.COMM_WORLD._state = None
            _comm.COMM_SELF._state = None
            for name in _mpi4py_names():
                del sys.modules[name]
            sys.modules.update(self.saved)


@contextlib.contextmanager
def installed(comm):
    """Run the block with ``mpi4py`` (and ``mpi4py.MPI``) importable as the
    stand-in on ``comm``; yields the MPI module. See the module docstring."""
    installation = _Installation(comm)
    try:
        yield MPI
    except BaseException as exc:
        installation.end(False, exc)
        raise
    installation.end(True)


def installed_for_run(comm):
    """``MPI.COMM_WORLD`` of the stand-in on ``comm``, the world communicator
    of the run this rank is in: installed now, for the rest of the run,
    unless it already is (see the module docstring)."""
    _runtime.check_world(comm)
    rt = _runtime.current
    if rt is not None:
        if rt.world is not comm:
            raise SimdistError(
                f"rank {comm.rank}: the mpi4py stand-in is already installed on this rank on {rt.world!r}, "
                f"not on {comm!r}: use the communicator the run passed to the function")
        return MPI.COMM_WORLD
    from simdist._worker import at_return

    at_return(_Installation(comm).end)
    return MPI.COMM_WORLD


def for_current_run() -> None:
    """Install the stand-in for the rest of the run when this process is a
    simulator rank inside ``World.run``; otherwise raise the error that says
    how to run the program."""
    from simdist._worker import _current

    if _current is None or getattr(_current, "transport", None) is None:
        raise SimdistError(_runtime.NOT_RUNNING)
    installed_for_run(_current)


_runtime.install_for_current_run = for_current_run
