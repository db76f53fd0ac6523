"""Running an SPMD script on every rank, as ``mpiexec`` would (``simdist run``).

Each rank executes the script (or module) as ``__main__`` with the given
``sys.argv``; inside, :func:`simdist.comm` returns the rank's communicator.
The ranks' output goes straight to the terminal; rank 0 reads the
standard input of ``simdist run`` and the other ranks read end of file, as
under mpiexec (the worlds hand it over: ``simdist._stdin``). A
``sys.exit(code)`` ends the rank with that code; an exception fails the run
with its traceback.

On the simulator, ``mpi4py`` is the stand-in of ``fake_backends.mpi4py``
while the script runs, so ``from mpi4py import MPI`` gives a simulated MPI
on the rank's communicator and unmodified mpi4py programs run; their
``MPI.COMM_WORLD.Abort(code)`` ends the run with exit status ``code``. On
the MPI backend the script imports the real mpi4py.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from . import checks as _checks
from .checks import _latereads, _races
from ._environ import as_under_mpiexec, patched
from ._errors import CollectiveMismatch, CollectiveTimeout, Deadlock, RankDied, RankError, SimdistError
from ._main import run_main
from ._world import World
from .sim._spares import OVERSUBSCRIBE

#: Exit status of a run that hung (as ``timeout(1)``).
HUNG = 124


@dataclass
class ScriptOutcome:
    """How a script ran: ``status`` is the process exit status to use."""

    status: int
    codes: list = field(default_factory=list)  # each rank's exit code, when all ranks ended
    error: str = ""  # the failure report, empty on success
    findings: list = field(default_factory=list)  # what --check found (simdist.checks.Finding)
    summary: str = ""  # what the race check explored


@contextlib.contextmanager
def _mpi4py_stand_in(comm, enabled: bool):
    """``mpi4py`` is the simulated MPI of ``fake_backends.mpi4py``, and the
    environment holds what Open MPI's ``mpiexec`` gives the rank (simulator only)."""
    if not enabled:
        yield
        return
    from fake_backends.mpi4py import installed

    with installed(comm), as_under_mpiexec(comm.rank, comm.size):
        yield


def _torchrun_env(rank: int, size: int, enabled: bool):
    """The environment torchrun gives a rank while the script runs: its
    rank and sizes always, the rest (``MASTER_ADDR``, ``OMP_NUM_THREADS``,
    ...) where the launcher's environment has not set them (simulator only:
    under mpiexec, across hosts, a rank's local rank is not its rank)."""
    if not enabled:
        return contextlib.nullcontext()
    from .torch._launch import RANK_KEYS, torchrun_env

    return patched({k: v for k, v in torchrun_env(rank, size).items() if k in RANK_KEYS or k not in os.environ})


def _rank_main(comm, target: str, argv: list[str], module: bool, mpi4py_stand_in: bool = False,
               checks=frozenset(), findings_dir: str | None = None, race: dict | None = None) -> int:
    """Run the script as ``__main__`` on this rank; return its exit code.
    ``checks`` are on while it runs, writing findings to ``findings_dir``;
    ``race``: the settings of a run that looks for message races."""
    with (_checks.active(checks, findings_dir, comm.rank), _races.on_rank(race, comm.rank),
          _mpi4py_stand_in(comm, mpi4py_stand_in), _torchrun_env(comm.rank, comm.size, mpi4py_stand_in)):
        try:
            return run_main(target, argv, module)
        except CollectiveMismatch as exc:  # the run sees each rank's call; the rank sees its line
            if _checks.enabled("collective-order") and (found := _checks.mismatch_on_rank(exc, comm.rank)):
                _checks.record(found)
            raise


def run_script(target: str, argv: list[str], size: int, *, module: bool = False, backend: str = "sim",
               timeout: float = 60.0, hosts: dict | None = None, checks=frozenset(),
               race_runs: int | None = None, universe: int | None = None) -> ScriptOutcome:
    """Run ``target`` (a path, or a module name with ``module=True``) on
    ``size`` ranks; return the outcome instead of raising. ``hosts``: World's
    hosts, hostfile, launcher and listen arguments. ``checks``: the kinds of
    ``simdist.checks`` to look for; what they find is the outcome's
    ``findings``, and a run that otherwise succeeded then has status
    ``checks.FOUND``. ``race_runs``: at most so many re-runs for the
    ``race`` check. ``universe``: the simulator's slots in all, spare ones
    included (World's; by default ``"oversubscribe"``, as mpiexec's)."""
    if not module and not os.path.isfile(target):
        return ScriptOutcome(2, error=f"simdist run: no such script: {target}")
    checks = frozenset(checks)
    if universe is None and backend == "sim":  # spawn as mpiexec --oversubscribe does
        universe = OVERSUBSCRIBE
    world_options = {**(hosts or {}), **({} if universe is None else {"universe": universe})}
    if backend == "sim":  # imported once here, every rank inherits them instead of importing its own
        import fake_backends.mpi4py  # noqa: F401

        if not module:
            from .torch._preload import preload

            preload(target, size)
    with _checks.FindingsDir(bool(checks)) as found, _races.Explorer(checks, size, race_runs) as races:
        started = time.monotonic()
        outcome = _run_once(target, argv, size, module, backend, timeout, world_options, checks, found.path,
                            races.original())
        races.elapsed = time.monotonic() - started

        def quiet_run(race):
            limit = min(timeout, race.get("timeout", _races.RERUN_TIMEOUT))
            return _run_once(target, argv, size, module, backend, limit, world_options, checks, None, race)

        raced = races.explore(outcome, quiet_run) + _latereads.explore(races, quiet_run)
        outcome.findings = found.collect(outcome.findings + raced)
    outcome.summary = races.summary
    if outcome.findings and outcome.status == 0:
        outcome.status = _checks.FOUND
    return outcome


def _run_once(target, argv, size, module, backend, timeout, world_options, checks, findings_dir,
              race=None) -> ScriptOutcome:
    options = dict(sync_sends="buffering" in checks, check_calls="collective-order" in checks)
    try:
        with World(size, backend=backend, timeout=timeout, **options, **world_options) as world:
            codes = world.run(_rank_main, target, list(argv), module, backend == "sim", checks,
                              findings_dir, race)
    except Deadlock as exc:
        return ScriptOutcome(HUNG, error=f"simdist run: the ranks hung: {exc}", findings=_checks.findings_of(exc, checks))
    except CollectiveTimeout as exc:
        return ScriptOutcome(HUNG, error=f"simdist run: the ranks hung: {exc}")
    except RankError as exc:
        aborted = _mpi_abort(exc)
        if aborted is not None:
            return aborted
        return ScriptOutcome(1, error=f"simdist run: {type(exc).__name__}: {exc}")
    except CollectiveMismatch as exc:
        return ScriptOutcome(1, error=f"simdist run: {type(exc).__name__}: {exc}", findings=_checks.findings_of(exc, checks))
    except RankDied as exc:
        return ScriptOutcome(1, error=f"simdist run: {type(exc).__name__}: {exc}")
    except SimdistError as exc:  # the world could not start (e.g. no mpiexec)
        return ScriptOutcome(1, error=f"simdist run: {exc}")
    status = max(codes, key=lambda c: (c != 0, c))  # the first non-zero, as mpiexec reports
    return ScriptOutcome(status, codes)


def _mpi_abort(exc: RankError) -> ScriptOutcome | None:
    """The outcome of a run a rank ended with ``MPI.COMM_WORLD.Abort(code)``
    (the lowest such rank's code, as mpiexec reports the first), or None."""
    from fake_backends.mpi4py import MPIAbort

    aborts = {rank: e for rank, e in exc.exceptions.items() if isinstance(e, MPIAbort)}
    if not aborts:
        return None
    rank = min(aborts)
    code = aborts[rank].code
    lines = [f"simdist run: MPI_Abort({code}) on rank {rank}"]
    others = {r: tb for r, tb in exc.failures.items() if r not in aborts}
    lines += [f"--- rank {r} ---\n{tb.rstrip()}" for r, tb in others.items()]
    return ScriptOutcome(code, error="\n".join(lines))
